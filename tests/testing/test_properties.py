"""Ready-made properties: each passes on a good machine and, on a machine with that bug,
fails with the counterexample as an event list."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from statecharts import assign, create_machine
from statecharts.testing.properties import (
    PropertyViolation,
    assert_all_states_reachable,
    assert_deterministic,
    assert_final_always_reachable,
    assert_no_deadlock,
    assert_persistence_invisible,
    assert_properties,
)

from .example_machines import (
    counter_machine,
    door_machine,
    jam_machine,
    player_machine,
    vending_machine,
)


def test_good_machines_have_all_properties() -> None:
    assert_properties(counter_machine())
    assert_properties(player_machine())
    assert_properties(
        vending_machine(seeded_bug=False),
        "determinism",
        "persistence",
        "no_deadlock",
        "all_states_reachable",
    )


def test_deadlock_is_reported_with_the_shortest_path() -> None:
    with pytest.raises(PropertyViolation) as caught:
        assert_no_deadlock(jam_machine())
    assert caught.value.event_types == ["PRINT", "JAM"]
    assert "state 'jammed' with context {} is not final and nothing leaves it" in str(caught.value)
    assert "counterexample: PRINT -> JAM" in str(caught.value)


def test_final_state_unreachable_from_a_trap() -> None:
    with pytest.raises(PropertyViolation) as caught:
        assert_final_always_reachable(jam_machine())
    assert caught.value.event_types == ["PRINT", "JAM"]
    with pytest.raises(PropertyViolation, match="from state 'closed'"):
        assert_final_always_reachable(door_machine())  # the door never finishes


def test_unreachable_states_are_named() -> None:
    with pytest.raises(PropertyViolation, match="never active: broken"):
        assert_all_states_reachable(door_machine())


def test_nondeterministic_guard_is_caught() -> None:
    flips = itertools.cycle([True, False])

    def lucky(context: Any, event: Any) -> bool:  # reads hidden state: a bug
        return next(flips)

    machine = create_machine(
        {
            "id": "coin",
            "initial": "a",
            "states": {
                "a": {"on": {"FLIP": [{"target": "b", "guard": "lucky"}]}},
                "b": {"on": {"FLIP": "a"}},
            },
        },
        guards={"lucky": lucky},
    )
    with pytest.raises(PropertyViolation) as caught:
        assert_deterministic(machine)
    assert caught.value.event_types == ["FLIP"]
    assert "the same events gave different snapshots" in str(caught.value)


def test_context_that_json_cannot_hold_breaks_persistence() -> None:
    # Python ints are unbounded, JSON storage (orjson) is 64-bit: GROW x7 overflows
    machine = create_machine(
        {
            "id": "grower",
            "context": {"size": 1},
            "initial": "on",
            "states": {"on": {"on": {"GROW": {"actions": "grow"}, "RESET": {"actions": "reset"}}}},
        },
        actions={
            "grow": assign({"size": lambda ctx, ev: ctx["size"] * 1000}),
            "reset": assign({"size": 1}),
        },
    )
    with pytest.raises(PropertyViolation) as caught:
        assert_persistence_invisible(machine)
    assert caught.value.event_types == ["GROW"] * 7
    assert "persisting failed" in str(caught.value)


def test_unknown_property_names_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"unknown properties \['liveness'\]"):
        assert_properties(door_machine(), "liveness")


def test_assert_properties_takes_ends_as_docs_testing_md_documents() -> None:
    """Issue 44: ``assert_properties(machine, ends=("done", "error"))`` raised TypeError (ends
    went on to the explorer); it is ``final_always_reachable``'s, as docs/testing.md says."""
    machine = create_machine(
        {
            "id": "pay",
            "initial": "charging",
            "states": {
                "charging": {"on": {"OK": "paid", "DECLINED": "declined"}},
                "paid": {"type": "final"},
                "declined": {"type": "final", "failure": "card declined"},
                "stuck": {},
            },
        }
    )
    assert_properties(machine, "final_always_reachable", ends=("done", "error"))
    limbo = create_machine(
        {
            **machine.config,
            "states": {
                **machine.config["states"],
                "charging": {"on": {"OK": "paid", "WAIT": "stuck"}},
            },
        }
    )
    with pytest.raises(PropertyViolation, match="stuck"):
        assert_properties(limbo, "final_always_reachable", ends=("done", "error"))
