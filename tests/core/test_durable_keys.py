"""Values every store holds exactly, failure finals, transient call sites and the fingerprint:
the engine half of the durable-runs rules (the durable half: tests/persistence/
test_fault_injection.py)."""

from __future__ import annotations

from typing import Any

import pytest

from statecharts import (
    ContextError,
    MachineDefinitionError,
    SimulatedClock,
    assign,
    create_actor,
    create_machine,
    setup,
)
from statecharts.errors import SnapshotVersionError
from statecharts.frozen import EMPTY, freeze, frozen_update, storable_text

POISONS: list[tuple[Any, str]] = [
    (2**63, "signed 64-bit"),
    (-(2**63) - 1, "signed 64-bit"),
    (2**70, "signed 64-bit"),
    ("\ud800", "lone surrogate"),
    ("a\x00b", "NUL"),
    (float("nan"), "not a JSON number"),
    (float("-inf"), "not a JSON number"),
]


@pytest.mark.parametrize(("value", "why"), POISONS)
def test_values_no_store_holds_are_refused_naming_the_key_path(value: Any, why: str) -> None:
    with pytest.raises(ContextError, match=why) as raised:
        freeze({"order": {"lines": [1, {"amount": value}]}})
    assert raised.value.path == "order.lines[1].amount"
    with pytest.raises(ContextError, match=why) as raised:
        frozen_update(EMPTY, {"total": value})  # assign's fast path checks too
    assert raised.value.path == "total"


def test_nul_and_surrogates_in_keys_are_refused_and_the_extremes_accepted() -> None:
    for key in ("a\x00", "\udc00"):
        with pytest.raises(ContextError, match="key"):
            freeze({"x": {key: 1}})
        with pytest.raises(ContextError, match="key"):
            frozen_update(EMPTY, {key: 1})
    edge = {"max": 2**63 - 1, "min": -(2**63), "text": "héllo ✓ 𝄞", "f": 1.5e308}
    assert freeze(edge) == edge
    assert storable_text("a\x00b\ud800") == "a\\x00b\\ud800"


def test_an_assign_producing_a_poison_fails_with_the_key_path() -> None:
    machine = create_machine(
        {
            "id": "m",
            "initial": "a",
            "context": {"n": 1},
            "states": {"a": {"on": {"BIG": {"actions": assign({"n": lambda c, e: 2**70})}}}},
        }
    )
    snapshot, _ = machine.initial_transition()
    with pytest.raises(ContextError, match="'n'"):
        machine.transition(snapshot, "BIG")


def test_a_failure_final_ends_the_machine_as_an_error_on_every_runner() -> None:
    config = {
        "id": "pay",
        "initial": "charging",
        "states": {
            "charging": {"on": {"DECLINED": "declined", "OK": "paid"}},
            "paid": {"type": "final"},
            "declined": {"type": "final", "failure": "card declined"},
            "nested": {"initial": "x", "states": {"x": {"type": "final", "failure": True}}},
        },
    }
    machine = create_machine(config)
    snapshot, _ = machine.initial_transition()
    failed, _ = machine.transition(snapshot, "DECLINED")
    assert (failed.status, failed.error, failed.value) == ("error", "card declined", "declined")
    done, _ = machine.transition(snapshot, "OK")
    assert (done.status, done.error) == ("done", None)
    actor = create_actor(machine, clock=SimulatedClock()).start()
    actor.send({"type": "DECLINED"})
    assert (actor.get_snapshot().status, actor.get_snapshot().error) == ("error", "card declined")
    nested = create_machine({**config, "initial": "nested"})
    start, _ = nested.initial_transition()
    assert (start.status, start.error) == ("error", "pay.nested.x")  # true: the state's id


@pytest.mark.parametrize(
    ("state", "problem"),
    [
        ({"failure": True}, "belongs on final states"),
        ({"type": "final", "failure": 3}, "true or the failure's reason"),
        ({"type": "final", "failure": ""}, "true or the failure's reason"),
    ],
)
def test_failure_is_validated_naming_its_path(state: dict[str, Any], problem: str) -> None:
    with pytest.raises(MachineDefinitionError, match=f"states.a.failure: .*{problem}"):
        create_machine({"id": "m", "initial": "a", "states": {"a": state}})


def test_transient_is_validated_and_kept_on_the_invoke_definition() -> None:
    kit = setup(actors={"write": lambda value: value})

    def invoke(transient: Any) -> Any:
        machine = kit.create_machine(
            {
                "id": "m",
                "initial": "a",
                "states": {"a": {"invoke": {"src": "write", "transient": transient}}},
            }
        )
        return machine.get_state_node("m.a").invoke[0].transient

    assert invoke(True) is True and invoke(False) is False
    assert invoke(["DatabaseError", "OperationalError"]) == ("DatabaseError", "OperationalError")
    for bad in ("yes", [], [""], [1]):
        with pytest.raises(MachineDefinitionError, match=r"states\.a\.invoke\.transient"):
            invoke(bad)
    retried = kit.create_machine(
        {
            "id": "m",
            "initial": "a",
            "states": {
                "a": {"invoke": {"src": "write", "transient": True, "retry": {"max_attempts": 2}}}
            },
        }
    )
    assert retried.get_state_node("m.a.attempting").invoke[0].transient is True


def test_the_fingerprint_covers_version_initial_context_and_call_site_keys() -> None:
    kit = setup(actors={"write": lambda value: value})

    def fingerprint(**changes: Any) -> str:
        invoke = {"src": "write", **changes.pop("invoke", {})}
        config = {
            "id": "m",
            "initial": "a",
            "context": {"n": 1},
            "states": {"a": {"invoke": invoke}},
            **changes,
        }
        return kit.create_machine(config).fingerprint

    base = fingerprint()
    variants = [
        fingerprint(version="3"),
        fingerprint(context={"n": 2}),
        fingerprint(invoke={"transient": True}),
        fingerprint(invoke={"breaker": "db"}),
        fingerprint(invoke={"input": 5}),
        fingerprint(invoke={"external": True}),
    ]
    assert base not in variants and len(set(variants)) == len(variants)
    assert fingerprint(description="words only") == base  # descriptions change nothing
    by_kwarg = create_machine({"id": "m", "initial": "a", "states": {"a": {}}}, version="3")
    by_config = create_machine({"id": "m", "version": "3", "initial": "a", "states": {"a": {}}})
    assert by_kwarg.fingerprint == by_config.fingerprint


def test_snapshots_from_before_the_version_counted_restore_only_with_their_label() -> None:
    v1 = create_machine({"id": "m", "version": "1", "initial": "a", "states": {"a": {}}})
    v3 = create_machine({"id": "m", "version": "3", "initial": "a", "states": {"a": {}}})
    snapshot, _ = v1.initial_transition()
    old = {**v1.persist(snapshot), "fingerprint": v1.definition.legacy_fingerprint}
    assert v1.restore(old).value == "a"  # persisted by the previous release: still steps
    with pytest.raises(SnapshotVersionError, match="no migration"):
        v3.restore(old)
