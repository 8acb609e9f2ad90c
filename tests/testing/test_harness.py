"""The rule-based harness finds a seeded bug and reports the shrunk event list."""

from __future__ import annotations

import pytest

from statecharts import create_machine
from statecharts.testing.harness import (
    InvariantViolation,
    collect_invariants,
    machine_test,
    run_machine_test,
)

from .example_machines import CHECKS, door_machine, vending_machine


def test_seeded_bug_is_found_with_the_shortest_event_list() -> None:
    machine = vending_machine(seeded_bug=True)
    with pytest.raises(InvariantViolation) as caught:
        run_machine_test(machine, checks=CHECKS)
    assert caught.value.event_types == ["COIN", "SELECT"]
    message = str(caught.value)
    assert "invariant 'credit_not_negative' (in state 'vending') failed" in message
    assert "'credit': -1" in message
    assert "events: COIN -> SELECT" in message


def test_the_fixed_machine_passes() -> None:
    run_machine_test(vending_machine(seeded_bug=False), checks=CHECKS)


def test_invariants_by_state_path_and_always() -> None:
    machine = vending_machine(seeded_bug=False)
    with pytest.raises(InvariantViolation) as caught:
        run_machine_test(machine, checks=CHECKS, invariants={"": lambda ctx: ctx["credit"] <= 3})
    assert caught.value.event_types == ["COIN", "COIN", "COIN", "COIN"]
    assert "(always) failed" in str(caught.value)
    with pytest.raises(InvariantViolation) as caught:
        run_machine_test(
            machine, checks=CHECKS, invariants={"paying": [lambda ctx: ctx["credit"] < 2]}
        )
    assert caught.value.event_types == ["COIN", "COIN"]
    assert "(in state 'paying') failed" in str(caught.value)


def test_payload_events_and_timers_are_driven() -> None:
    machine = create_machine(
        {
            "id": "kettle",
            "context": {"temp": 20},
            "initial": "off",
            "states": {
                "off": {"on": {"ON": {"target": "heating", "actions": "set"}}},
                "heating": {"after": {"1000": "boiled"}},
                "boiled": {"on": {"RESET": "off"}},
            },
        },
        actions={"set": __import__("statecharts").assign({"temp": lambda ctx, ev: ev["temp"]})},
    )
    from hypothesis import strategies as st

    with pytest.raises(InvariantViolation) as caught:
        run_machine_test(
            machine,
            payloads={"ON": st.fixed_dictionaries({"temp": st.integers(0, 100)})},
            invariants={"boiled": lambda ctx: ctx["temp"] < 90},
        )
    events = caught.value.events
    assert [e["type"] for e in events] == ["ON", "xstate.after.1000.kettle.heating"], str(
        caught.value
    )
    assert [e["type"] for e in events] == ["ON", "xstate.after.1000.kettle.heating"]
    assert events[0]["temp"] >= 90
    assert events[1]["timer"] == "xstate.after.1000.kettle.heating"
    assert "(timer) xstate.after.1000.kettle.heating" in str(caught.value)


def test_unknown_invariant_targets_are_named() -> None:
    with pytest.raises(
        ValueError,
        match=r"invariants\['nowhere'\]: machine 'door' has no "
        r"state 'nowhere'",
    ):
        collect_invariants(door_machine(), {"nowhere": lambda ctx: True})
    with pytest.raises(
        ValueError,
        match=r"states.vending.meta.invariants: no check named "
        r"'credit_not_negative'",
    ):
        collect_invariants(vending_machine(seeded_bug=False))


TestVendingMachine = machine_test(
    vending_machine(seeded_bug=False), checks=CHECKS, max_examples=30
).TestCase
