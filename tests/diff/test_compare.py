"""Synthetic pairs: each kind of change a reviewer must see, found and worded exactly."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from statecharts.diff import diff_machines
from statecharts.diff.changes import MachineDiff
from tests.diff.pairs import BASE, edited, machine


def changes(diff: MachineDiff) -> list[tuple[str, str, str, str]]:
    """(mark, kind, where, text) per change; durations keep their no-break spaces in the
    report, plain spaces here."""
    return [(c.mark, c.kind, c.where, c.text.replace("\u00a0", " ")) for c in diff.changes]


def diff_of(edit: Any, **extra: Any) -> MachineDiff:
    return diff_machines(machine(BASE), machine(edited(edit), **extra))


def states(config: dict[str, Any]) -> dict[str, Any]:
    return config["states"]  # type: ignore[no-any-return]


def test_the_same_definition_has_no_changes() -> None:
    diff = diff_machines(machine(BASE), machine(edited(lambda c: None)))
    assert diff.empty and diff.removed_states() == ()


def test_a_description_alone_is_no_change() -> None:
    def describe(c: dict[str, Any]) -> None:
        states(c)["charging"]["description"] = "Charge the card"

    assert diff_of(describe).empty


def test_state_added() -> None:
    def add(c: dict[str, Any]) -> None:
        states(c)["on_hold"] = {"on": {"RESUME": "charging"}}
        states(c)["waiting_for_payment"]["on"]["HOLD"] = "on_hold"

    assert changes(diff_of(add)) == [
        ("added", "transition", "waiting_for_payment", "new: on hold → on_hold"),
        ("added", "state", "on_hold", "new state “On hold”"),
    ]


def test_state_removed_with_the_state_inside_it() -> None:
    def remove(c: dict[str, Any]) -> None:
        del states(c)["shipping"]["states"]["labelling"]
        states(c)["shipping"]["states"]["packing"]["on"]["PACKED"] = "done"

    diff = diff_of(remove)
    assert changes(diff) == [
        (
            "changed",
            "target",
            "shipping.packing",
            "on packed: goes to shipping.labelling → shipping.done",
        ),
        ("removed", "state", "shipping.labelling", "state “Labelling” removed"),
    ]
    assert diff.removed_states() == ("shipping.labelling",)
    assert "shipping.packing" in diff.changed_states


def test_state_renamed_by_a_hint_on_the_command_line() -> None:
    def rename(c: dict[str, Any]) -> None:
        states(c)["awaiting_payment"] = states(c).pop("waiting_for_payment")
        c["initial"] = "awaiting_payment"

    old, new = machine(BASE), machine(edited(rename))
    without = diff_machines(old, new)
    assert (
        "removed",
        "state",
        "waiting_for_payment",
        "state “Waiting for payment” removed",
    ) in changes(without)
    hinted = diff_machines(old, new, {"waiting_for_payment": "awaiting_payment"})
    assert changes(hinted) == [
        ("changed", "renamed", "awaiting_payment", "renamed from waiting_for_payment (hint)")
    ]
    assert hinted.matched["waiting_for_payment"] == "awaiting_payment"
    assert hinted.removed_states() == ()


def test_state_renamed_by_a_hint_in_the_definition() -> None:
    def rename(c: dict[str, Any]) -> None:
        moved = states(c).pop("cancelled")
        states(c)["aborted"] = {**moved, "meta": {"renamed_from": "cancelled"}}
        for key in ("PAY", "CANCEL"):
            on = states(c)["waiting_for_payment"]["on"]
            on[key] = (
                [{"target": "aborted"} if t == {"target": "cancelled"} else t for t in on[key]]
                if isinstance(on[key], list)
                else "aborted"
            )
        states(c)["waiting_for_payment"]["after"]["300000"] = "aborted"

    assert changes(diff_of(rename)) == [
        ("changed", "renamed", "aborted", "renamed from cancelled (hint)")
    ]


def test_state_renamed_by_the_new_definitions_migration() -> None:
    def rename(c: dict[str, Any]) -> None:
        c["version"] = "2"
        states(c)["billing"] = states(c).pop("charging")
        states(c)["waiting_for_payment"]["on"]["PAY"][0]["target"] = "billing"

    def from_v1(data: dict[str, Any]) -> dict[str, Any]:
        value = data["value"]
        if isinstance(value, dict) and "charging" in value:
            value = {"billing": value["charging"]}
        return {**data, "value": value}

    diff = diff_of(rename, migrations={"1": from_v1})
    assert changes(diff) == [
        ("changed", "version", "", 'version "1" → "2"'),
        ("changed", "renamed", "billing", "renamed from charging (migration from '1')"),
    ]
    assert diff.matched["charging.attempting"] == "billing.attempting"


def test_a_migration_that_moves_runs_of_a_removed_state_elsewhere() -> None:
    def merge(c: dict[str, Any]) -> None:
        c["version"] = "2"
        del states(c)["shipping"]["states"]["labelling"]
        states(c)["shipping"]["states"]["packing"]["on"]["PACKED"] = "done"

    def from_v1(data: dict[str, Any]) -> dict[str, Any]:
        if data["value"] == {"shipping": "labelling"}:
            return {**data, "value": {"shipping": "packing"}}
        return data

    diff = diff_of(merge, migrations={"1": from_v1})
    assert (
        "removed",
        "state",
        "shipping.labelling",
        "state “Labelling” removed; the migration moves its runs to shipping.packing",
    ) in changes(diff)
    assert diff.migrated_to == {"shipping.labelling": "shipping.packing"}


def test_state_moved_under_another_parent() -> None:
    def move(c: dict[str, Any]) -> None:
        cancelled = states(c).pop("cancelled")
        states(c)["closed"] = {"type": "final"}
        states(c)["shipping"]["states"]["cancelled"] = cancelled
        states(c)["shipping"]["states"]["packing"]["on"]["CANCEL"] = "cancelled"
        on = states(c)["waiting_for_payment"]
        on["on"]["PAY"][1]["target"] = "closed"
        on["on"]["CANCEL"] = "closed"
        on["after"]["300000"] = "closed"

    found = changes(diff_of(move))
    assert ("changed", "moved", "shipping.cancelled", "moved from cancelled") in found
    assert ("added", "state", "closed", "new end “Closed”") in found
    assert (
        "changed",
        "target",
        "waiting_for_payment",
        "on cancel: goes to cancelled → closed",
    ) in found


def test_transition_added_removed_and_retargeted() -> None:
    def edit(c: dict[str, Any]) -> None:
        on = states(c)["waiting_for_payment"]["on"]
        del on["CANCEL"]
        on["REMIND"] = {"actions": "notifyOps"}
        states(c)["shipping"]["states"]["packing"]["on"]["PACKED"] = "done"

    assert changes(diff_of(edit)) == [
        ("removed", "transition", "waiting_for_payment", "on cancel → cancelled removed"),
        ("added", "transition", "waiting_for_payment", "new: on remind (stays)"),
        (
            "changed",
            "target",
            "shipping.packing",
            "on packed: goes to shipping.labelling → shipping.done",
        ),
    ]


def test_guard_and_actions_changed() -> None:
    def edit(c: dict[str, Any]) -> None:
        pay = states(c)["waiting_for_payment"]["on"]["PAY"][0]
        pay["guard"] = "isLarge"
        pay["actions"] = ["recordPayment", "notifyOps"]
        states(c)["waiting_for_payment"]["entry"] = []

    assert changes(diff_of(edit)) == [
        ("changed", "entry", "waiting_for_payment", "on entry: logStart → nothing"),
        ("changed", "guard", "waiting_for_payment", "on pay: if it is paid → if it is large"),
        (
            "changed",
            "actions",
            "waiting_for_payment",
            "on pay: then recordPayment → recordPayment, notifyOps",
        ),
    ]


def test_retry_policy_changed_added_and_removed() -> None:
    def more(c: dict[str, Any]) -> None:
        states(c)["charging"]["invoke"]["retry"] = {
            "max_attempts": 5,
            "initial_interval": 1000,
            "backoff": "exponential",
        }

    assert changes(diff_of(more)) == [
        (
            "changed",
            "retry",
            "charging",
            "retries up to 2 times → 4 times; waiting 1 s between tries → 1 s, 2 s, 4 s, 8 s",
        ),
    ]

    def none(c: dict[str, Any]) -> None:
        del states(c)["charging"]["invoke"]["retry"]

    assert changes(diff_of(none)) == [
        (
            "removed",
            "retry",
            "charging",
            "retries up to 2 times, waiting 1 s between tries, retries every error → no retries",
        ),
    ]

    def non_retryable(c: dict[str, Any]) -> None:
        states(c)["charging"]["invoke"]["retry"]["non_retryable"] = ["CardDeclined"]

    assert changes(diff_of(non_retryable)) == [
        ("changed", "retry", "charging", "retries every error → never retries CardDeclined"),
    ]


def test_a_longer_list_of_waits_is_given_whole() -> None:
    """Issue 44: 3 -> 5 tries read "waiting 2 s, 4 s → 4 s, 8 s, 16 s" (the shared "2 s," was
    said once, so the new waits looked like 4, 8, 16 s); the new waits are 2, 4, 8, 16 s."""

    def tries(attempts: int) -> Callable[[dict[str, Any]], None]:
        def edit(c: dict[str, Any]) -> None:
            states(c)["charging"]["invoke"]["retry"] = {
                "max_attempts": attempts,
                "initial_interval": 2000,
                "backoff": "exponential",
            }

        return edit

    assert changes(diff_machines(machine(edited(tries(3))), machine(edited(tries(5))))) == [
        (
            "changed",
            "retry",
            "charging",
            "retries up to 2 times → 4 times; waiting 2 s, 4 s → 2 s, 4 s, 8 s, 16 s",
        ),
    ]


def test_breaker_and_failure_class_changed() -> None:
    def edit(c: dict[str, Any]) -> None:
        invoke = states(c)["charging"]["invoke"]
        invoke["breaker"] = "payments"
        del invoke["onError"]
        invoke["onFinalFailure"] = "skip"

    assert changes(diff_of(edit)) == [
        ("added", "breaker", "charging", 'circuit breaker: none → "payments"'),
        (
            "changed",
            "failure class",
            "charging",
            "when it still fails: onError handles it → skipped, goes on along onDone",
        ),
        ("removed", "transition", "charging", "if charge card fails → failed removed"),
    ]


def test_removing_a_retry_with_its_skip_reports_that_a_failure_now_fails_the_run() -> None:
    """Issue 44: the diff of dropping `retry` and `onFinalFailure: "skip"` from the mail call
    said nothing of the mail failure now failing the order; dropping only the retry keeps the
    skip (it works without a retry), so only the retry change is reported."""

    def skip(c: dict[str, Any]) -> None:
        invoke = states(c)["charging"]["invoke"]
        del invoke["onError"]
        invoke["onFinalFailure"] = "skip"

    old = machine(edited(skip))

    def both(c: dict[str, Any]) -> None:
        skip(c)
        invoke = states(c)["charging"]["invoke"]
        del invoke["retry"], invoke["onFinalFailure"]

    assert changes(diff_machines(old, machine(edited(both)))) == [
        (
            "removed",
            "retry",
            "charging",
            "retries up to 2 times, waiting 1 s between tries, retries every error → no retries",
        ),
        (
            "changed",
            "failure class",
            "charging",
            "when it still fails: skipped, goes on along onDone → the run fails",
        ),
    ]

    def retry_only(c: dict[str, Any]) -> None:
        skip(c)
        del states(c)["charging"]["invoke"]["retry"]

    assert [kind for _, kind, _, _ in changes(diff_machines(old, machine(edited(retry_only))))] == [
        "retry"
    ]


def test_timers_changed() -> None:
    def edit(c: dict[str, Any]) -> None:
        states(c)["waiting_for_payment"]["after"] = {"paymentTimeout": "cancelled"}

    assert changes(diff_of(edit)) == [
        (
            "changed",
            "timer",
            "waiting_for_payment",
            "after 5 minutes → after the payment timeout (10 minutes)",
        ),
    ]


def test_error_workflow_context_and_state_type() -> None:
    def edit(c: dict[str, Any]) -> None:
        c["meta"] = {"error_workflow": "order_alerts"}
        c["context"] = {"amount": 100, "currency": "EUR"}
        states(c)["cancelled"] = {"on": {"REOPEN": "waiting_for_payment"}}

    assert changes(diff_of(edit)) == [
        ("added", "error workflow", "", 'error workflow none → "order_alerts"'),
        ("changed", "context", "", "context key amount starts as 0 → 100"),
        ("added", "context", "", 'context key currency added (starts as "EUR")'),
        ("removed", "context", "", "context key paid removed"),
        ("changed", "type", "cancelled", "end → state"),
        ("added", "transition", "cancelled", "new: on reopen → waiting_for_payment"),
    ]


def test_invoke_added_and_its_work_changed() -> None:
    def edit(c: dict[str, Any]) -> None:
        states(c)["delivered"] = {
            "invoke": {"id": "mail", "src": "sendMail", "onDone": "cancelled"}
        }
        states(c)["charging"]["invoke"]["src"] = "notifyTeam"

    found = changes(diff_of(edit))
    assert ("changed", "invoke", "charging", "doing: charge card → notify team") in found
    assert ("added", "invoke", "delivered", "now does: send mail") in found


def test_transient_call_sites_and_failure_finals() -> None:
    """``transient`` (a call site's failure class) and ``failure`` (a final state that ends the
    run as failed), the "nothing stalls" issue's keys."""

    def edit(c: dict[str, Any]) -> None:
        states(c)["charging"]["invoke"]["transient"] = ["DatabaseError"]
        states(c)["failed"]["failure"] = "card declined"

    diff = diff_of(edit)
    assert (
        "added",
        "failure class",
        "charging",
        'transient failures: none → ["DatabaseError"]',
    ) in changes(diff)
    assert (
        "changed",
        "failure class",
        "failed",
        "ends the run as a success → a failure (card declined)",
    ) in changes(diff)


def test_renames_naming_a_missing_state_are_refused() -> None:
    with pytest.raises(ValueError, match="the old machine has no state 'nowhere'"):
        diff_machines(machine(BASE), machine(BASE), {"nowhere": "charging"})


def test_the_order_of_changes_is_fixed() -> None:
    def edit(c: dict[str, Any]) -> None:
        states(c)["charging"]["invoke"]["breaker"] = "payments"
        del states(c)["cancelled"]
        states(c)["waiting_for_payment"]["on"] = {"PAY": "charging"}
        states(c)["waiting_for_payment"]["after"] = {"300000": "failed"}

    first = changes(diff_of(edit))
    assert first == changes(diff_of(edit))
    assert [m for m, *_ in first][-1] == "removed"  # removed states come last


def test_call_input_changed() -> None:
    def edit(c: dict[str, Any]) -> None:
        states(c)["charging"]["invoke"]["input"] = {"$context": ["amount"]}

    assert changes(diff_of(edit)) == [
        ("added", "invoke", "charging", 'input: none → {"$context":["amount"]}')
    ]
