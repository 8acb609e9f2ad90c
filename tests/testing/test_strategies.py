"""Strategies: events from the machine's alphabet with payloads, reachable snapshots, and
random machines that are valid and exercise every feature they promise."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statecharts.testing.graph import explore
from statecharts.testing.properties import deterministic_on, persistence_invisible_on
from statecharts.testing.strategies import (
    EVENTS,
    GeneratedMachine,
    events,
    machines,
    reachable_snapshots,
)

from .example_machines import door_machine, vending_machine

FAST = settings(
    max_examples=60,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@FAST
@given(events(door_machine()))
def test_events_come_from_the_alphabet(sequence: list[Any]) -> None:
    assert {e["type"] for e in sequence} <= {"OPEN", "LOCK", "CLOSE", "UNLOCK", "REPAIR"}


@FAST
@given(
    events(
        vending_machine(seeded_bug=False),
        {"COIN": st.fixed_dictionaries({"cents": st.sampled_from([5, 10, 25])})},
        min_size=1,
    )
)
def test_payload_strategies_fill_their_event_type(sequence: list[Any]) -> None:
    for event in sequence:
        if event["type"] == "COIN":
            assert event["cents"] in (5, 10, 25)
        else:
            assert set(event) == {"type"}


def test_payloads_for_unknown_events_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"payloads for \['KICK'\]"):
        events(door_machine(), {"KICK": st.just({})})


@FAST
@given(reachable_snapshots(vending_machine(seeded_bug=False), max_steps=10))
def test_reachable_snapshots_are_reachable(snapshot: Any) -> None:
    assert snapshot.value in ("idle", "paying", "vending")
    assert 0 <= snapshot.context["credit"] <= 5


def test_random_machines_use_every_feature_and_are_valid() -> None:
    seen: Counter[str] = Counter()

    @settings(
        max_examples=200,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(machines())
    def run(generated: GeneratedMachine) -> None:
        machine = generated.build()  # raises MachineDefinitionError if invalid
        kinds = {n.type for n in machine.definition.nodes}
        seen.update(kinds)
        for node in machine.definition.nodes:
            if node.always:
                seen["eventless"] += 1
            if any(t.guard for t in node.transitions):
                seen["guard"] += 1
            if any(t.reenter for t in node.transitions):
                seen["reenter"] += 1
        assert {
            e["type"] for e in (e.segment.event for e in explore(machine, max_states=50).edges)
        } <= set(EVENTS)

    run()
    for feature in ("compound", "parallel", "history", "final", "eventless", "guard", "reenter"):
        assert seen[feature] > 0, seen


@settings(
    max_examples=150,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(machines(max_states=8), st.lists(st.sampled_from(EVENTS), max_size=12))
def test_engine_is_deterministic_and_persists_exactly_on_random_machines(
    generated: GeneratedMachine, sequence: list[str]
) -> None:
    machine = generated.build()
    deterministic_on(machine, sequence)
    persistence_invisible_on(machine, sequence)
