"""Rules that show only over several events or through the actor: the internal queue drains
before the next external event, loops that never settle raise instead of hanging, a done
machine ignores events, failing guards name themselves."""

from __future__ import annotations

from typing import Any

import pytest

from statecharts import (
    ImplementationError,
    InfiniteLoopError,
    assign,
    create_actor,
    create_machine,
    raise_,
)

from .corekit import build


def test_internal_queue_drains_before_the_next_external_event() -> None:
    order: list[str] = []
    actor_box: list[Any] = []

    def send_f(context: Any, event: Any) -> None:
        order.append("send F")
        actor_box[0].send("F")  # external: waits in the mailbox until E's macrostep is done

    config = {
        "id": "m",
        "initial": "a",
        "states": {
            "a": {"on": {"E": {"actions": [raise_("I"), "send_f"]}, "F": "wrong", "I": "b"}},
            "b": {"entry": "entered_b", "on": {"F": "c"}},
            "c": {},
            "wrong": {},
        },
    }
    machine = create_machine(
        config, actions={"send_f": send_f, "entered_b": lambda c, e: order.append("enter b")}
    )
    actor = create_actor(machine)
    actor_box.append(actor)
    actor.start()
    actor.send("E")
    assert actor.get_snapshot().value == "c"
    assert order == ["send F", "enter b"]


LOOPS = {
    "always-ping-pong": {
        "id": "m",
        "initial": "a",
        "states": {"a": {"always": "b"}, "b": {"always": "a"}},
    },
    "raise-itself": {
        "id": "m",
        "initial": "a",
        "states": {"a": {"entry": raise_("PING"), "on": {"PING": {"actions": raise_("PING")}}}},
    },
    "targetless-eventless-raise": {
        "id": "m",
        "initial": "a",
        "states": {"a": {"always": {"actions": raise_("X")}}},
    },
    "counter-that-never-reaches-its-goal": {
        "id": "m",
        "initial": "a",
        "context": {"n": 0},
        "states": {
            "a": {
                "always": {
                    "guard": lambda c, e: c["n"] >= 0,
                    "actions": assign({"n": lambda c, e: c["n"] + 1}),
                }
            }
        },
    },
}


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_eventless_loop_raises_instead_of_hanging(name: str) -> None:
    machine = create_machine(LOOPS[name])
    with pytest.raises(InfiniteLoopError) as info:
        machine.initial_transition()
    assert "did not settle" in str(info.value)
    assert "m.a" in str(info.value) or "m.b" in str(info.value)


def test_loop_reached_by_an_event_raises_from_transition_and_send() -> None:
    config = {
        "id": "m",
        "initial": "idle",
        "states": {"idle": {"on": {"GO": "a"}}, "a": {"always": "b"}, "b": {"always": "a"}},
    }
    machine = create_machine(config)
    snapshot, _ = machine.initial_transition()
    with pytest.raises(InfiniteLoopError):
        machine.transition(snapshot, "GO")
    actor = create_actor(machine).start()
    with pytest.raises(InfiniteLoopError):
        actor.send("GO")


EQUAL_VALUE_LOOPS = {
    "one-region": {
        "id": "m",
        "initial": "a",
        "context": {"n": 1},
        "states": {"a": {"always": {"actions": assign({"n": 1})}}},
    },
    "two-regions": {
        "id": "m",
        "type": "parallel",
        "context": {"n": 1, "k": 1},
        "states": {
            "r1": {"initial": "a", "states": {"a": {"always": {"actions": assign({"n": 1})}}}},
            "r2": {"initial": "b", "states": {"b": {"always": {"actions": assign({"k": 1})}}}},
        },
    },
}


@pytest.mark.parametrize("name", sorted(EQUAL_VALUE_LOOPS))
def test_eventless_assign_of_an_equal_value_is_still_a_loop(name: str) -> None:
    # XState re-selects eventless transitions whenever an assign made a new snapshot, even
    # with equal values, so this never settles there; here it raises, however many regions
    with pytest.raises(InfiniteLoopError):
        create_machine(EQUAL_VALUE_LOOPS[name]).initial_transition()


def test_eventless_targetless_user_action_runs_once() -> None:
    machine = build({"id": "m", "initial": "a", "states": {"a": {"always": {"actions": "t"}}}})
    _, effects = machine.initial_transition()
    assert [e.type for e in effects if hasattr(e, "type")] == ["+(root)", "+a", "t"]


def test_done_machine_ignores_events_in_the_pure_core() -> None:
    machine = build(
        {
            "id": "m",
            "initial": "a",
            "context": {"n": 0},
            "on": {"INC": {"actions": [assign({"n": 1}), "t"]}},
            "states": {"a": {"on": {"F": "fin"}}, "fin": {"type": "final"}},
        }
    )
    snapshot, _ = machine.initial_transition()
    done, _ = machine.transition(snapshot, "F")
    assert done.status == "done"
    after, effects = machine.transition(done, "INC")
    assert after is done
    assert effects == ()
    assert done.can("INC") is False


def test_failing_guard_names_itself_and_the_transition() -> None:
    def boom(context: Any, event: Any) -> bool:
        raise RuntimeError("kaput")

    machine = create_machine(
        {
            "id": "m",
            "initial": "a",
            "states": {
                "a": {
                    "on": {"E": [{"guard": "ok", "target": "b"}, {"guard": "boom", "target": "b"}]}
                },
                "b": {},
            },
        },
        guards={"boom": boom, "ok": lambda c, e: False},
    )
    snapshot, _ = machine.initial_transition()
    with pytest.raises(ImplementationError) as info:
        machine.transition(snapshot, "E")
    assert "guard 'boom'" in str(info.value)
    assert "states.a.on.E[1]" in str(info.value)
    assert "kaput" in str(info.value)


def test_entry_and_exit_effects_follow_xstate_order() -> None:
    # XState appends an `after` state's delayed raise to its entry actions and the cancel to
    # its exit actions; invocations start after the entry actions and stop after the exit ones
    machine = create_machine(
        {
            "id": "m",
            "initial": "idle",
            "states": {
                "idle": {"on": {"GO": "busy"}},
                "busy": {
                    "entry": "hello",
                    "exit": "bye",
                    "after": {"100": "idle"},
                    "invoke": {"id": "worker", "src": "work"},
                    "on": {"STOP": "idle"},
                },
            },
        },
        actions={"hello": lambda c, e: None, "bye": lambda c, e: None},
        actors={"work": lambda input: None},
    )
    snapshot, _ = machine.initial_transition(now=0)
    snapshot, effects = machine.transition(snapshot, "GO", now=0)
    assert [e.kind for e in effects] == ["action", "start_timer", "start_child"]
    _, effects = machine.transition(snapshot, "STOP", now=10)
    assert [e.kind for e in effects] == ["action", "cancel_timer", "stop_child"]


def test_initial_entry_actions_see_the_init_event_with_input() -> None:
    seen: list[Any] = []
    machine = create_machine(
        {
            "id": "m",
            "initial": "a",
            "context": lambda input: {"x": input},
            "states": {"a": {"entry": "look"}},
        },
        actions={"look": lambda c, e: seen.append((dict(c), dict(e)))},
    )
    create_actor(machine, input=5).start()
    create_actor(machine).start()
    assert seen == [
        ({"x": 5}, {"type": "xstate.init", "input": 5}),
        ({"x": None}, {"type": "xstate.init"}),
    ]
