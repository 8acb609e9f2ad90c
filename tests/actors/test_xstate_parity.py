"""The actor behaviours where this engine used to differ from XState v5 (issue 25), each pinned
by the behaviour a user sees: run on the actor runtime, and through the pure core where the
durable runtime takes its effects from."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from statecharts import (
    ActorStoppedError,
    ImplementationError,
    SimulatedClock,
    create_actor,
    create_machine,
    from_callable,
    from_callback,
)
from statecharts.actions import assign, send_parent, send_to
from statecharts.effects import StartChild, StopChild

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _answering_child() -> Any:
    return create_machine(
        {
            "id": "child",
            "initial": "w",
            "states": {"w": {"on": {"KNOCK": {"actions": send_parent("ANSWER")}}}},
        }
    )


def test_entry_send_to_the_states_own_invocation_is_delivered_once_it_started() -> None:
    machine = create_machine(
        {
            "initial": "a",
            "states": {
                "a": {
                    "entry": send_to("kid", "KNOCK"),
                    "invoke": {"id": "kid", "src": "child"},
                    "on": {"ANSWER": "b"},
                },
                "b": {},
            },
        },
        actors={"child": _answering_child()},
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    assert actor.get_snapshot().value == "b"


def test_entry_send_to_a_system_id_started_by_the_same_state_is_delivered() -> None:
    machine = create_machine(
        {
            "initial": "idle",
            "states": {
                "idle": {"on": {"GO": "a"}},
                "a": {
                    "entry": send_to("door", "KNOCK"),
                    "invoke": {"id": "kid", "systemId": "door", "src": "child"},
                    "on": {"ANSWER": "b"},
                },
                "b": {},
            },
        },
        actors={"child": _answering_child()},
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    actor.send("GO")
    assert actor.get_snapshot().value == "b"


def _failing_child(where: str) -> Any:
    def boom(context: Any, event: Any) -> None:
        raise RuntimeError("child broke")

    states: dict[str, Any] = (
        {"x": {"entry": "boom"}}
        if where == "entry"
        else {"x": {"on": {"POKE": {"actions": "boom"}}}}
    )
    return create_machine({"id": "bad", "initial": "x", "states": states}, actions={"boom": boom})


def test_child_machine_failing_while_starting_takes_on_error() -> None:
    machine = create_machine(
        {
            "initial": "a",
            "states": {
                "a": {
                    "invoke": {
                        "id": "kid",
                        "src": "bad",
                        "onError": {
                            "target": "failed",
                            "actions": assign({"why": lambda c, e: e["error"]["message"]}),
                        },
                    }
                },
                "failed": {},
            },
        },
        actors={"bad": _failing_child("entry")},
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    snapshot = actor.get_snapshot()
    assert (snapshot.value, snapshot.status) == ("failed", "active")
    assert "child broke" in snapshot.context["why"]


def test_child_machine_failing_while_starting_without_on_error_fails_the_parent() -> None:
    machine = create_machine(
        {"initial": "a", "states": {"a": {"invoke": {"id": "kid", "src": "bad"}}}},
        actors={"bad": _failing_child("entry")},
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()  # does not raise
    assert actor.get_snapshot().status == "error"
    assert "child broke" in actor.get_snapshot().error["message"]


def test_child_machine_failing_on_an_event_from_its_parent_takes_on_error() -> None:
    machine = create_machine(
        {
            "initial": "a",
            "states": {
                "a": {
                    "invoke": {"id": "kid", "src": "bad", "onError": "failed"},
                    "on": {"GO": {"actions": send_to("kid", "POKE")}},
                },
                "failed": {},
            },
        },
        actors={"bad": _failing_child("event")},
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    actor.send("GO")  # the child's error does not come out of the parent's send
    assert actor.get_snapshot().value == "failed"


def test_invocation_of_a_state_left_in_the_same_macrostep_never_starts() -> None:
    calls: list[str] = []

    def callback(send_back: Any, receive: Any, input: Any) -> Any:
        calls.append("started")
        return lambda: calls.append("cleaned up")

    machine = create_machine(
        {
            "initial": "a",
            "states": {"a": {"always": "b", "invoke": {"id": "cb", "src": "cb"}}, "b": {}},
        },
        actors={"cb": from_callback(callback)},
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    assert actor.get_snapshot().value == "b"
    assert calls == []
    # the pure core, whose effects the durable runtime executes, says the same
    _, effects = machine.initial_transition()
    assert not [e for e in effects if isinstance(e, StartChild | StopChild)]


def test_invocation_restarted_by_a_reentry_stops_the_old_child_only() -> None:
    calls: list[str] = []

    def callback(send_back: Any, receive: Any, input: Any) -> Any:
        calls.append("started")
        return lambda: calls.append("cleaned up")

    machine = create_machine(
        {
            "initial": "a",
            "states": {
                "a": {
                    "invoke": {"id": "cb", "src": "cb"},
                    "on": {"AGAIN": {"target": "a", "reenter": True}, "LEAVE": "b"},
                },
                "b": {},
            },
        },
        actors={"cb": from_callback(callback)},
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    actor.send("AGAIN")
    actor.send("LEAVE")
    assert calls == ["started", "cleaned up", "started", "cleaned up"]


def test_finished_child_stays_in_children_until_its_state_is_exited() -> None:
    machine = create_machine(
        {
            "initial": "a",
            "states": {"a": {"invoke": {"id": "job", "src": "job"}, "on": {"GO": "b"}}, "b": {}},
        },
        actors={"job": from_callable(lambda i: 5)},
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    children = actor.get_snapshot().children
    assert list(children) == ["job"]
    assert children["job"].status == "done"
    actor.send("GO")
    assert dict(actor.get_snapshot().children) == {}


def test_finished_child_is_not_run_again_after_a_restore() -> None:
    calls: list[int] = []

    def job(input: Any) -> int:
        calls.append(1)
        return 5

    machine = create_machine(
        {
            "initial": "a",
            "states": {
                "a": {
                    "invoke": {"id": "job", "src": "job"},
                    "on": {
                        "xstate.done.actor.job": {
                            "actions": assign({"n": lambda c, e: e["output"]})
                        },
                        "GO": "b",
                    },
                },
                "b": {},
            },
        },
        actors={"job": from_callable(job)},
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    data = actor.get_persisted_snapshot()
    assert data["children"]["job"]["state"] == {"finished": "done"}
    resumed = create_actor(machine, clock=SimulatedClock(), snapshot=data).start()
    assert calls == [1]
    assert resumed.get_snapshot().children["job"].status == "done"
    assert resumed.get_snapshot().context == {"n": 5}


def test_failed_child_is_kept_with_status_error() -> None:
    def job(input: Any) -> int:
        raise ValueError("nope")

    machine = create_machine(
        {
            "initial": "a",
            "states": {
                "a": {
                    "invoke": {"id": "job", "src": "job", "onError": {"actions": assign({"e": 1})}}
                }
            },
        },
        actors={"job": from_callable(job)},
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    assert actor.get_snapshot().children["job"].status == "error"


def test_entry_action_failing_leaves_the_errored_snapshot_in_the_previous_state() -> None:
    def boom(context: Any, event: Any) -> None:
        raise RuntimeError("entry broke")

    machine = create_machine(
        {"initial": "a", "states": {"a": {"on": {"GO": "b"}}, "b": {"entry": "boom"}}},
        actions={"boom": boom},
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    with pytest.raises(ImplementationError, match="action 'boom'"):
        actor.send("GO")
    snapshot = actor.get_snapshot()
    assert (snapshot.value, snapshot.status) == ("a", "error")
    assert "entry broke" in snapshot.error["message"]


def test_event_sent_to_a_done_actor_is_dropped_and_reported(caplog: Any) -> None:
    records: list[Any] = []
    machine = create_machine(
        {"initial": "a", "states": {"a": {"on": {"END": "z"}}, "z": {"type": "final"}}}
    )
    actor = create_actor(machine, clock=SimulatedClock(), inspect=records.append).start()
    actor.send("END")
    with caplog.at_level(logging.WARNING, logger="statecharts"):
        actor.send({"type": "LATE_WEBHOOK", "id": 7})  # does not raise
    assert actor.get_snapshot().status == "done"
    dropped = [r for r in records if r.type == "@statecharts.dropped"]
    assert [r.event for r in dropped] == [{"type": "LATE_WEBHOOK", "id": 7}]
    assert "has ended (done); it cannot receive 'LATE_WEBHOOK' (dropped)" in caplog.text


def test_event_sent_to_a_done_actor_raises_in_strict_mode() -> None:
    machine = create_machine({"initial": "z", "states": {"z": {"type": "final"}}})
    actor = create_actor(machine, clock=SimulatedClock(), strict=True).start()
    with pytest.raises(ActorStoppedError, match=r"has ended \(done\).*'LATE'"):
        actor.send("LATE")


def test_can_is_false_once_the_machine_is_not_active_and_docs_say_so() -> None:
    machine = create_machine({"initial": "z", "states": {"z": {"type": "final", "on": {"E": "z"}}}})
    snapshot, _ = machine.initial_transition()
    assert snapshot.status == "done"
    assert snapshot.can("E") is False
    differences = (
        (DOCS / "semantics.md").read_text().split("## Where this engine differs from XState")[1]
    )
    assert "`can()` is false" in differences
