"""What a snapshot answers: value, matches, tags, can, output, status, active leaves."""

from __future__ import annotations

from typing import Any

import pytest

from statecharts import assign, create_machine
from statecharts.snapshot import Snapshot

CONFIG: dict[str, Any] = {
    "id": "shop",
    "initial": "browsing",
    "context": {"items": 0},
    "states": {
        "browsing": {
            "tags": ["idle"],
            "on": {
                "ADD": {"actions": assign({"items": lambda c, e: c["items"] + 1})},
                "CHECKOUT": {"guard": "has_items", "target": "checkout"},
                "BLOCKED": {},
                "NOTE": {"actions": "note"},
            },
        },
        "checkout": {
            "type": "parallel",
            "tags": ["busy"],
            "states": {
                "payment": {
                    "initial": "card",
                    "states": {
                        "card": {"tags": ["needs-input"], "on": {"PAY": "paid"}},
                        "paid": {"type": "final"},
                    },
                },
                "shipping": {
                    "initial": "address",
                    "states": {
                        "address": {"tags": ["needs-input"], "on": {"SHIP": "ready"}},
                        "ready": {"type": "final"},
                    },
                },
            },
            "onDone": "done",
        },
        "done": {"type": "final"},
    },
    "output": lambda context, event: {"items": context["items"]},
}


def start() -> tuple[Any, Snapshot]:
    machine = create_machine(
        CONFIG,
        guards={"has_items": lambda c, e: c["items"] > 0},
        actions={"note": lambda c, e: None},
    )
    return machine, machine.initial_transition()[0]


def drive(*events: Any) -> Snapshot:
    machine, snapshot = start()
    for event in events:
        snapshot, _ = machine.transition(snapshot, event)
    return snapshot


MATCHES: list[tuple[tuple[str, ...], Any, bool]] = [
    ((), "browsing", True),
    ((), "checkout", False),
    (("ADD", "CHECKOUT"), "checkout", True),
    (("ADD", "CHECKOUT"), "checkout.payment.card", True),
    (("ADD", "CHECKOUT"), "checkout.payment", True),
    (("ADD", "CHECKOUT"), "checkout.payment.paid", False),
    (("ADD", "CHECKOUT"), {"checkout": {"payment": "card", "shipping": "address"}}, True),
    (("ADD", "CHECKOUT"), {"checkout": {"payment": "card"}}, True),
    (("ADD", "CHECKOUT"), {"checkout": {"payment": "paid"}}, False),
    (("ADD", "CHECKOUT"), "checkout.nowhere", False),
    (("ADD", "CHECKOUT", "PAY"), "checkout.payment.paid", True),
]


@pytest.mark.parametrize(("events", "value", "expected"), MATCHES)
def test_matches(events: tuple[str, ...], value: Any, expected: bool) -> None:
    assert drive(*events).matches(value) is expected


TAGS: list[tuple[tuple[str, ...], frozenset[str]]] = [
    ((), frozenset({"idle"})),
    (("ADD", "CHECKOUT"), frozenset({"busy", "needs-input"})),
    (("ADD", "CHECKOUT", "PAY"), frozenset({"busy", "needs-input"})),
    (("ADD", "CHECKOUT", "PAY", "SHIP"), frozenset()),
]


@pytest.mark.parametrize(("events", "tags"), TAGS)
def test_tags_and_has_tag(events: tuple[str, ...], tags: frozenset[str]) -> None:
    snapshot = drive(*events)
    assert snapshot.tags == tags
    for tag in ("idle", "busy", "needs-input"):
        assert snapshot.has_tag(tag) is (tag in tags)


CAN: list[tuple[tuple[str, ...], Any, bool]] = [
    ((), "ADD", True),  # targetless with actions
    ((), "NOTE", True),
    ((), "CHECKOUT", False),  # guard fails with no items
    (("ADD",), "CHECKOUT", True),
    ((), "BLOCKED", False),  # forbidden transition
    ((), "UNKNOWN", False),
    ((), {"type": "ADD", "extra": 1}, True),
    (("ADD", "CHECKOUT"), "PAY", True),
    (("ADD", "CHECKOUT", "PAY", "SHIP"), "ADD", False),  # done machines take nothing
]


@pytest.mark.parametrize(("events", "event", "expected"), CAN)
def test_can(events: tuple[str, ...], event: Any, expected: bool) -> None:
    snapshot = drive(*events)
    assert snapshot.can(event) is expected


def test_can_does_not_change_the_snapshot() -> None:
    snapshot = drive("ADD")
    before = (snapshot.value, dict(snapshot.context))
    assert snapshot.can("CHECKOUT")
    assert (snapshot.value, dict(snapshot.context)) == before


def test_output_status_and_leaves_through_a_run() -> None:
    snapshot = drive("ADD", "ADD", "CHECKOUT", "SHIP")
    assert snapshot.status == "active"
    assert snapshot.output is None
    assert snapshot.active_leaves() == ("checkout.payment.card", "checkout.shipping.ready")
    snapshot = drive("ADD", "ADD", "CHECKOUT", "SHIP", "PAY")
    assert snapshot.status == "done"
    assert snapshot.value == "done"
    assert snapshot.output == {"items": 2}
    assert snapshot.error is None


def test_snapshots_are_frozen_and_only_made_by_the_engine() -> None:
    snapshot = drive()
    with pytest.raises(AttributeError):
        snapshot.status = "done"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Snapshot()


def test_same_inputs_same_outputs() -> None:
    machine, snapshot = start()
    first = machine.transition(snapshot, "ADD")
    second = machine.transition(snapshot, "ADD")
    assert first[0] == second[0]
    assert first[1] == second[1]
    assert snapshot.context == {"items": 0}  # the input snapshot is untouched
