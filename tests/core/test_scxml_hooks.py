"""The guard hook interpreters of other chart languages (SCXML) rely on: a guard function
marked ``takes_scope`` receives the action scope, so it can test the configuration and queue
an internal event (SCXML raises ``error.execution`` when a condition cannot be evaluated)."""

from typing import Any

from statecharts import create_machine


def _failing_condition(context: Any, event: Any, scope: Any) -> bool:
    scope.raise_internal({"type": "cond.failed"})
    return False


_failing_condition.takes_scope = True  # type: ignore[attr-defined]


def _in_left(context: Any, event: Any, scope: Any) -> bool:
    return bool(scope.in_state("m.left"))


_in_left.takes_scope = True  # type: ignore[attr-defined]


def test_a_scoped_guard_can_queue_an_internal_event_that_the_machine_then_takes() -> None:
    machine = create_machine(
        {
            "id": "m",
            "initial": "idle",
            "states": {
                "idle": {
                    "on": {"GO": [{"target": "wrong", "guard": "cond"}, {"target": "waiting"}]}
                },
                "waiting": {"on": {"cond.failed": "reported"}},
                "wrong": {},
                "reported": {},
            },
        },
        guards={"cond": _failing_condition},
    )
    snapshot, _ = machine.initial_transition()
    snapshot, _ = machine.transition(snapshot, "GO")
    assert snapshot.value == "reported"


def test_a_scoped_guard_sees_the_configuration() -> None:
    machine = create_machine(
        {
            "id": "m",
            "initial": "left",
            "states": {
                "left": {"on": {"GO": {"target": "right", "guard": "inLeft"}}},
                "right": {"on": {"GO": {"target": "left", "guard": "inLeft"}}},
            },
        },
        guards={"inLeft": _in_left},
    )
    snapshot, _ = machine.initial_transition()
    snapshot, _ = machine.transition(snapshot, "GO")
    assert snapshot.value == "right"
    snapshot, _ = machine.transition(snapshot, "GO")
    assert snapshot.value == "right"  # the guard now fails: not in left


def test_plain_guards_are_still_called_with_context_and_event_only() -> None:
    calls: list[tuple[Any, ...]] = []

    def plain(*args: Any) -> bool:
        calls.append(args)
        return True

    machine = create_machine(
        {
            "id": "m",
            "initial": "a",
            "states": {"a": {"on": {"GO": {"target": "b", "guard": "plain"}}}, "b": {}},
        },
        guards={"plain": plain},
    )
    snapshot, _ = machine.initial_transition()
    machine.transition(snapshot, "GO")
    assert len(calls) == 1 and len(calls[0]) == 2


def test_a_machine_done_during_its_initial_transition_runs_exit_actions() -> None:
    # found by W3C test 236: a child whose initial state is final sends from its onexit
    machine = create_machine(
        {
            "id": "m",
            "initial": "done",
            "states": {"done": {"type": "final", "exit": [{"type": "record"}]}},
        },
        actions={"record": lambda context, event: None},
    )
    snapshot, effects = machine.initial_transition()
    assert snapshot.status == "done"
    assert [e.type for e in effects if e.kind == "action"] == ["record"]


def test_events_a_child_sends_while_the_parent_starts_wait_for_the_start_to_finish() -> None:
    # found with W3C test 236: an invoked child that answers at once had its event processed
    # in the middle of the parent's initial effects (run-to-completion broken)
    from statecharts import create_actor
    from statecharts.actions import send_parent

    calls: list[str] = []
    child = create_machine(
        {"id": "child", "initial": "c", "states": {"c": {"entry": [send_parent("PING")]}}}
    )
    parent = create_machine(
        {
            "id": "parent",
            "initial": "a",
            "invoke": {"id": "kid", "src": "child"},
            "states": {"a": {"entry": ["enteredA"], "on": {"PING": {"actions": "ping"}}}},
        },
        actors={"child": child},
        actions={
            "enteredA": lambda c, e: calls.append("entered a"),
            "ping": lambda c, e: calls.append("ping"),
        },
    )
    create_actor(parent).start()
    assert calls == ["entered a", "ping"]
