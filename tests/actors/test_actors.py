"""Actors: each logic kind, done/error routing, stop on exit, spawn/stop, parent/child sends,
cancel, and time that survives persistence (issue 3)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
import pytest

from statecharts import (
    ActorStoppedError,
    ImplementationError,
    SimulatedClock,
    assign,
    cancel,
    create_actor,
    create_machine,
    from_async,
    from_callable,
    from_callback,
    raise_,
    send_parent,
    send_to,
    spawn_child,
    stop_child,
    wait_for,
)


def test_callable_actor_done_routes_output_to_on_done() -> None:
    machine = create_machine(
        {
            "initial": "loading",
            "context": {},
            "states": {
                "loading": {
                    "invoke": {
                        "src": "load",
                        "input": {"n": 2},
                        "onDone": {
                            "target": "ready",
                            "actions": assign({"value": lambda c, e: e["output"]}),
                        },
                    }
                },
                "ready": {},
            },
        },
        actors={"load": from_callable(lambda input: input["n"] * 21)},
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    assert actor.get_snapshot().value == "ready"
    assert actor.get_snapshot().context == {"value": 42}


def test_callable_actor_error_routes_to_on_error_with_error_json() -> None:
    def fail(input: Any) -> None:
        raise ConnectionError("smtp down")

    machine = create_machine(
        {
            "initial": "sending",
            "context": {},
            "states": {
                "sending": {
                    "invoke": {
                        "src": "send",
                        "onDone": "sent",
                        "onError": {
                            "target": "failed",
                            "actions": assign({"why": lambda c, e: e["error"]["message"]}),
                        },
                    }
                },
                "sent": {},
                "failed": {},
            },
        },
        actors={"send": from_callable(fail)},
    )
    snapshot = create_actor(machine, clock=SimulatedClock()).start().get_snapshot()
    assert snapshot.value == "failed"
    assert snapshot.context == {"why": "smtp down"}


def test_unhandled_actor_error_puts_the_machine_in_error() -> None:
    def fail(input: Any) -> None:
        raise ValueError("bad")

    machine = create_machine(
        {"initial": "a", "states": {"a": {"invoke": {"src": "f"}}}}, actors={"f": fail}
    )
    snapshot = create_actor(machine, clock=SimulatedClock()).start().get_snapshot()
    assert snapshot.status == "error"
    assert snapshot.error["name"] == "ValueError"


def test_async_actor_runs_coroutine() -> None:
    async def fetch(input: Any) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"id": input["id"], "name": "Ada"}

    machine = create_machine(
        {
            "initial": "fetching",
            "context": {},
            "states": {
                "fetching": {
                    "invoke": {
                        "src": "fetch",
                        "input": lambda c, e: {"id": 7},
                        "onDone": {
                            "target": "done",
                            "actions": assign({"customer": lambda c, e: e["output"]}),
                        },
                    }
                },
                "done": {"type": "final"},
            },
        },
        actors={"fetch": from_async(fetch)},
    )
    snapshot = create_actor(machine, clock=SimulatedClock()).start().get_snapshot()
    assert snapshot.status == "done"
    assert snapshot.context["customer"] == {"id": 7, "name": "Ada"}


def test_callback_actor_sends_back_receives_and_cleans_up_on_exit() -> None:
    received: list[str] = []
    cleaned: list[bool] = []

    def ticker(send_back: Any, receive: Any, input: Any) -> Any:
        receive(lambda event: received.append(event["type"]))
        send_back({"type": "TICK"})
        return lambda: cleaned.append(True)

    machine = create_machine(
        {
            "initial": "listening",
            "context": {"ticks": 0},
            "states": {
                "listening": {
                    "invoke": {"id": "ticker", "src": "ticker"},
                    "on": {
                        "TICK": {"actions": assign({"ticks": lambda c, e: c["ticks"] + 1})},
                        "PING": {"actions": send_to("ticker", {"type": "PING"})},
                        "DONE": "finished",
                    },
                },
                "finished": {},
            },
        },
        actors={"ticker": from_callback(ticker)},
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    assert actor.get_snapshot().context == {"ticks": 1}
    actor.send("PING")
    assert received == ["PING"]
    assert not cleaned
    actor.send("DONE")
    assert cleaned == [True]
    assert actor.get_snapshot().children == {}


def test_child_machine_send_parent_and_done() -> None:
    child = create_machine(
        {
            "id": "child",
            "initial": "waiting",
            "states": {
                "waiting": {
                    "on": {"GO": {"target": "done", "actions": send_parent({"type": "CHILD_WENT"})}}
                },
                "done": {"type": "final"},
            },
            "output": {"result": "finished"},
        }
    )
    parent = create_machine(
        {
            "id": "parent",
            "initial": "running",
            "context": {"heard": 0},
            "states": {
                "running": {
                    "invoke": {
                        "id": "kid",
                        "src": "child",
                        "onDone": {
                            "target": "over",
                            "actions": assign({"out": lambda c, e: e["output"]}),
                        },
                    },
                    "on": {
                        "POKE": {"actions": send_to("kid", "GO")},
                        "CHILD_WENT": {"actions": assign({"heard": lambda c, e: c["heard"] + 1})},
                    },
                },
                "over": {"type": "final"},
            },
        },
        actors={"child": child},
    )
    actor = create_actor(parent, clock=SimulatedClock()).start()
    assert set(actor.children) == {"kid"}
    actor.send("POKE")
    snapshot = actor.get_snapshot()
    assert snapshot.status == "done"
    assert snapshot.context == {"heard": 1, "out": {"result": "finished"}}


def test_invoked_child_is_stopped_when_its_state_is_exited() -> None:
    child = create_machine({"id": "child", "initial": "idle", "states": {"idle": {}}})
    parent = create_machine(
        {
            "initial": "a",
            "states": {
                "a": {"invoke": {"id": "kid", "src": "child"}, "on": {"LEAVE": "b"}},
                "b": {},
            },
        },
        actors={"child": child},
    )
    actor = create_actor(parent, clock=SimulatedClock()).start()
    kid = actor.children["kid"]
    actor.send("LEAVE")
    assert kid.status == "stopped"
    assert actor.children == {}
    assert actor.get_snapshot().children == {}


def test_spawn_and_stop_child() -> None:
    child = create_machine({"id": "child", "initial": "idle", "states": {"idle": {}}})
    machine = create_machine(
        {
            "initial": "a",
            "states": {
                "a": {
                    "on": {
                        "SPAWN": {"actions": spawn_child("child", id="worker")},
                        "STOP": {"actions": stop_child("worker")},
                    }
                }
            },
        },
        actors={"child": child},
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    actor.send("SPAWN")
    assert set(actor.get_snapshot().children) == {"worker"}
    worker = actor.children["worker"]
    actor.send("STOP")
    assert worker.status == "stopped"
    assert actor.get_snapshot().children == {}


def test_delayed_raise_and_cancel() -> None:
    clock = SimulatedClock()
    machine = create_machine(
        {
            "initial": "a",
            "context": {"fired": 0},
            "states": {
                "a": {
                    "on": {
                        "ARM": {"actions": raise_({"type": "BEEP"}, delay=500, id="beep")},
                        "DISARM": {"actions": cancel("beep")},
                        "BEEP": {"actions": assign({"fired": lambda c, e: c["fired"] + 1})},
                    }
                }
            },
        }
    )
    actor = create_actor(machine, clock=clock).start()
    actor.send("ARM")
    clock.advance(499)
    assert actor.get_snapshot().context["fired"] == 0
    clock.advance(1)
    assert actor.get_snapshot().context["fired"] == 1
    actor.send("ARM")
    actor.send("DISARM")
    clock.advance(10_000)
    assert actor.get_snapshot().context["fired"] == 1
    assert actor.get_snapshot().timers == ()


def test_polling_loop_fires_at_each_due_instant() -> None:
    """A 100 ms loop advanced by 250 ms fires twice (XState's clock would fire once)."""
    clock = SimulatedClock()
    seen: list[int] = []
    machine = create_machine(
        {
            "initial": "polling",
            "states": {
                "polling": {"entry": "poll", "after": {100: {"target": "polling", "reenter": True}}}
            },
        },
        actions={"poll": lambda c, e: seen.append(clock.now())},
    )
    create_actor(machine, clock=clock).start()
    clock.advance(250)
    assert seen == [0, 100, 200]


def test_after_timers_persisted_mid_wait_fire_in_due_order_on_restore() -> None:
    clock = SimulatedClock(1_000_000)
    order: list[str] = []
    machine = create_machine(
        {
            "initial": "waiting",
            "type": "parallel" if False else None,
            "states": {
                "waiting": {
                    "type": "parallel",
                    "states": {
                        "fast": {
                            "initial": "w",
                            "states": {"w": {"after": {100: "x"}}, "x": {"entry": "note_fast"}},
                        },
                        "slow": {
                            "initial": "w",
                            "states": {"w": {"after": {300: "x"}}, "x": {"entry": "note_slow"}},
                        },
                        "later": {
                            "initial": "w",
                            "states": {"w": {"after": {10_000: "x"}}, "x": {"entry": "note_later"}},
                        },
                    },
                }
            },
        },
        actions={
            "note_fast": lambda c, e: order.append(f"fast@{clock.now()}"),
            "note_slow": lambda c, e: order.append(f"slow@{clock.now()}"),
            "note_later": lambda c, e: order.append(f"later@{clock.now()}"),
        },
    )
    actor = create_actor(machine, clock=clock).start()
    saved = orjson.dumps(actor.get_persisted_snapshot())
    actor.stop()
    assert clock.pending() == 0, "a stopped actor leaves nothing pending on its clock"
    clock.advance(5_000)  # no actor running: both short timers become overdue
    assert order == []
    restored = create_actor(machine, clock=clock, snapshot=saved).start()
    assert order == ["fast@1005000", "slow@1005000"]  # at once, in due order
    clock.advance(4_999)
    assert order[2:] == []
    clock.advance(1)  # the future timer fires at its original due time
    assert order[2:] == ["later@1010000"]
    assert restored.get_snapshot().value == {"waiting": {"fast": "x", "slow": "x", "later": "x"}}


def test_restore_runs_no_entry_action_again() -> None:
    entered: list[str] = []
    machine = create_machine(
        {"initial": "a", "states": {"a": {"entry": "hello"}}},
        actions={"hello": lambda c, e: entered.append("a")},
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    data = actor.get_persisted_snapshot()
    create_actor(machine, clock=SimulatedClock(), snapshot=data).start()
    assert entered == ["a"]


def _parent_with_child() -> Any:
    child = create_machine(
        {
            "id": "counter",
            "initial": "counting",
            "context": {"n": 0},
            "states": {
                "counting": {
                    "on": {"INC": {"actions": assign({"n": lambda c, e: c["n"] + 1})}},
                    "after": {1000: {"target": "done"}},
                },
                "done": {"type": "final"},
            },
            "output": lambda c, e: {"n": c["n"]},
        }
    )
    return create_machine(
        {
            "id": "parent",
            "initial": "running",
            "context": {},
            "states": {
                "running": {
                    "invoke": {
                        "id": "counter",
                        "src": "counter",
                        "onDone": {
                            "target": "finished",
                            "actions": assign({"total": lambda c, e: e["output"]["n"]}),
                        },
                    },
                    "on": {"INC": {"actions": send_to("counter", "INC")}},
                },
                "finished": {"type": "final"},
            },
        },
        actors={"counter": child},
    )


def test_parent_with_running_child_persisted_restored_and_finished_like_uninterrupted() -> None:
    def run(interrupt: bool) -> Any:
        clock = SimulatedClock()
        machine = _parent_with_child()
        actor = create_actor(machine, clock=clock).start()
        actor.send("INC")
        actor.send("INC")
        clock.advance(400)
        if interrupt:
            data = orjson.dumps(actor.get_persisted_snapshot())
            actor.stop()
            actor = create_actor(_parent_with_child(), clock=clock, snapshot=data).start()
        actor.send("INC")
        clock.advance(600)
        snapshot = actor.get_snapshot()
        return snapshot.status, snapshot.value, snapshot.context, clock.now()

    assert run(interrupt=True) == run(interrupt=False) == ("done", "finished", {"total": 3}, 1000)


def test_unpersistable_child_restarts_or_fails_by_rule() -> None:
    calls: list[int] = []

    def slow(input: Any) -> str:
        calls.append(input["n"])
        return "ok"

    machine = create_machine(
        {
            "initial": "working",
            "states": {
                "working": {
                    "invoke": {
                        "id": "job",
                        "src": "job",
                        "input": {"n": 1},
                        "onDone": "ok",
                        "onError": "lost",
                    }
                },
                "ok": {},
                "lost": {},
            },
        },
        actors={"job": from_callable(slow)},
    )
    # a snapshot taken by the pure core while the call was in flight
    snapshot, _ = machine.initial_transition()
    data = machine.persist(snapshot)
    assert (
        create_actor(machine, clock=SimulatedClock(), snapshot=data).start().get_snapshot().value
        == "ok"
    )
    assert calls == [1]
    failed = create_actor(
        machine, clock=SimulatedClock(), snapshot=data, on_unpersistable="fail"
    ).start()
    assert failed.get_snapshot().value == "lost"
    assert calls == [1]


def test_sending_to_a_stopped_actor_raises_in_strict_mode() -> None:
    machine = create_machine({"initial": "a", "states": {"a": {}}})
    actor = create_actor(machine, clock=SimulatedClock(), strict=True).start()
    actor.stop()
    with pytest.raises(ActorStoppedError, match=r"'machine' has ended \(stopped\).*'ANY'"):
        actor.send("ANY")


def test_unknown_actor_name_in_invoke_is_a_definition_error() -> None:
    from statecharts import MachineDefinitionError

    with pytest.raises(
        MachineDefinitionError,
        match=r"states\.a\.invoke\.src: no actor 'lodr' "
        r"\(did you mean 'loader'\?\)",
    ):
        create_machine(
            {"initial": "a", "states": {"a": {"invoke": {"src": "lodr"}}}},
            actors={"loader": from_callable(lambda i: 1)},
        )


@pytest.mark.parametrize("bad", [-5, "soon", float("nan")])
def test_bad_delays_are_clear_errors(bad: Any) -> None:
    from statecharts import MachineDefinitionError

    if bad == "soon":
        with pytest.raises(MachineDefinitionError, match="no delay 'soon'"):
            create_machine({"initial": "a", "states": {"a": {"after": {bad: "a"}}}})
        return
    machine = create_machine(
        {"initial": "a", "states": {"a": {"after": {"d": "a"}}}}, delays={"d": lambda c, e: bad}
    )
    with pytest.raises(ImplementationError, match=r"delay 'd'.*non-negative number"):
        machine.initial_transition()


def test_event_for_a_child_without_handler_is_dropped_with_warning(caplog: Any) -> None:
    machine = create_machine(
        {"initial": "a", "states": {"a": {"on": {"SEND": {"actions": send_to("nobody", "HI")}}}}}
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    with caplog.at_level(logging.WARNING, logger="statecharts"):
        actor.send("SEND")
    assert "no child or system actor 'nobody'" in caplog.text
    assert actor.get_snapshot().status == "active"


def test_inspection_reports_events_microsteps_actions_snapshots() -> None:
    records: list[Any] = []
    machine = create_machine(
        {
            "initial": "a",
            "states": {"a": {"on": {"GO": {"target": "b", "actions": "note"}}}, "b": {}},
        },
        actions={"note": lambda c, e: None},
    )
    actor = create_actor(machine, clock=SimulatedClock(), inspect=records.append).start()
    actor.send("GO")
    actor.stop()
    kinds = [r.type for r in records]
    assert kinds[0] == "@xstate.actor"
    assert "@xstate.event" in kinds and "@xstate.microstep" in kinds
    assert "@xstate.action" in kinds and "@xstate.snapshot" in kinds
    assert kinds[-1] == "@xstate.stopped"
    micro = next(r for r in records if r.type == "@xstate.microstep" and r.event["type"] == "GO")
    assert micro.transitions == (("machine.a", ("machine.b",)),)


def test_wait_for_advances_simulated_time() -> None:
    clock = SimulatedClock()
    machine = create_machine({"initial": "a", "states": {"a": {"after": {3000: "b"}}, "b": {}}})
    actor = create_actor(machine, clock=clock).start()
    snapshot = wait_for(actor, lambda s: s.matches("b"), timeout=5000)
    assert snapshot.value == "b" and clock.now() == 3000
    with pytest.raises(TimeoutError):
        wait_for(actor, lambda s: s.matches("a"), timeout=1000)


def test_pure_core_returns_timer_and_child_effects_with_due_times() -> None:
    machine = create_machine(
        {
            "initial": "a",
            "states": {
                "a": {"after": {"1500": "b"}, "invoke": {"id": "job", "src": "job"}},
                "b": {},
            },
        },
        actors={"job": from_callable(lambda i: 1)},
    )
    snapshot, effects = machine.initial_transition(now=10_000)
    kinds = [e.kind for e in effects]
    assert kinds == ["start_timer", "start_child"]
    assert effects[0].to_json()["due_at"] == 11_500
    assert snapshot.timers[0].due_at == 11_500
    fired, effects = machine.fire_timer(snapshot, snapshot.timers[0].id, now=11_500)
    assert fired.value == "b"
    assert [e.kind for e in effects] == ["stop_child"]


def test_the_simulated_clock_says_when_its_next_timer_falls_due() -> None:
    # the n8n oracle moves its clock timer by timer (an hour's advance once fired 3,600
    # rounds of a 1 s Wait in a loop)
    clock = SimulatedClock(100)
    assert clock.next_due() is None
    fired: list[int] = []
    first = clock.schedule(400, lambda: fired.append(400))
    clock.schedule(900, lambda: fired.append(900))
    assert clock.next_due() == 400
    clock.cancel(first)
    assert clock.next_due() == 900  # a cancelled timer is not the next one
    clock.set(900)
    assert fired == [900] and clock.next_due() is None


def test_a_subclass_or_a_patch_of_machine_step_sees_every_event_an_actor_takes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An actor takes compiled routes without calling ``Machine.step``, but only while
    ``step`` is the engine's own: a subclass's ``step``, or a patch applied while the actor
    runs (as the test kit's coverage does), sees every event, the first and the routed ones."""
    from statecharts.definition import Implementations
    from statecharts.machine import Machine

    config = {
        "id": "t",
        "initial": "a",
        "context": {"n": 0},
        "states": {
            "a": {"on": {"GO": {"target": "b", "actions": assign({"n": lambda c, e: c["n"] + 1})}}},
            "b": {"on": {"GO": "a"}},
        },
    }
    seen: list[str] = []

    class Counting(Machine):
        def step(self, snapshot: Any, event: Any, now: Any, trace: Any = None) -> Any:
            seen.append(event["type"])
            return super().step(snapshot, event, now, trace)

    actor = create_actor(Counting(config, Implementations({}, {}, {}, {}))).start()
    for _ in range(4):
        actor.send("GO")
    assert seen == ["GO"] * 4
    assert actor.get_snapshot().value == "a" and actor.get_snapshot().context["n"] == 2

    plain = create_actor(create_machine(config)).start()
    for _ in range(2):
        plain.send("GO")  # the routes are compiled and taken by the actor itself
    engine_step = Machine.step

    def patched(machine: Machine, snapshot: Any, event: Any, now: Any, trace: Any = None) -> Any:
        seen.append(f"patched {event['type']}")
        return engine_step(machine, snapshot, event, now, trace)

    seen.clear()
    monkeypatch.setattr(Machine, "step", patched)
    for _ in range(3):
        plain.send("GO")
    assert seen == ["patched GO"] * 3
    monkeypatch.undo()
    plain.send("GO")
    assert seen == ["patched GO"] * 3
    assert plain.get_snapshot().value == "a" and plain.get_snapshot().context["n"] == 3
