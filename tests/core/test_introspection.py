"""``next_transitions`` / ``next_events`` (XState's getNextTransitions) and ``microsteps`` (its
microstep API), over the pure core (issue 25)."""

from __future__ import annotations

from statecharts import create_machine, raise_
from statecharts.introspection import Microstep, microsteps, next_events, next_transitions

MACHINE = create_machine(
    {
        "id": "m",
        "initial": "a",
        "states": {
            "a": {
                "initial": "a1",
                "on": {"GO": {"target": "b", "actions": raise_("NEXT")}},
                "states": {
                    "a1": {"on": {"GO": {"target": "a2", "guard": "never"}, "mouse.*": "a2"}},
                    "a2": {},
                },
            },
            "b": {"on": {"NEXT": "c"}},
            "c": {"always": "d"},
            "d": {"type": "final"},
        },
    },
    guards={"never": lambda c, e: False},
)


def test_next_transitions_lists_the_active_states_innermost_first_guards_unevaluated() -> None:
    snapshot, _ = MACHINE.initial_transition()
    listed = [
        (t.source.id, t.event, tuple(n.id for n in t.targets)) for t in next_transitions(snapshot)
    ]
    assert listed == [
        ("m.a.a1", "GO", ("m.a.a2",)),
        ("m.a.a1", "mouse.*", ("m.a.a2",)),
        ("m.a", "GO", ("m.b",)),
    ]
    assert next_events(snapshot) == ("GO", "mouse.*")


def test_next_transitions_is_empty_once_the_machine_is_done() -> None:
    snapshot, _ = MACHINE.initial_transition()
    done = MACHINE.transition(snapshot, "GO")[0]
    assert done.status == "done"
    assert next_transitions(done) == () and next_events(done) == ()


def test_microsteps_reports_each_microstep_of_a_macrostep_and_changes_nothing() -> None:
    snapshot, _ = MACHINE.initial_transition()
    steps, result = microsteps(snapshot, "GO")
    assert steps == (
        Microstep({"type": "GO"}, (("m.a", ("m.b",)),)),
        Microstep({"type": "NEXT"}, (("m.b", ("m.c",)),)),
        Microstep({"type": "NEXT"}, (("m.c", ("m.d",)),)),  # eventless: the last event seen
    )
    assert result == MACHINE.transition(snapshot, "GO")[0]
    assert snapshot.value == {"a": "a1"}  # the snapshot given is untouched


def test_microsteps_of_an_event_nothing_takes_is_empty() -> None:
    snapshot, _ = MACHINE.initial_transition()
    steps, result = microsteps(snapshot, "NOTHING")
    assert steps == () and result.value == snapshot.value
