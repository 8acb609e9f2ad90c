"""The retry vocabulary (``statecharts.retrying``): what the renderer, the diff, the driver and
the run columns read retries by, checked against a machine that really waits to retry, and
the names it keeps stored runs restoring by."""

from __future__ import annotations

from typing import Any

import orjson

from statecharts import SimulatedClock, create_actor, create_machine, from_callable
from statecharts.retrying import (
    VISITS,
    attempt_in_progress,
    is_retry_step,
    is_retry_transition,
    is_retry_wait,
    retried_state_of_timer,
    waits_to_retry,
)


class Unavailable(Exception):
    """A retryable downstream failure."""


def _waiting_machine() -> tuple[Any, Any]:
    """A shop whose ``charging`` call fails once and now waits to retry, inside a compound."""

    def charge(input: Any, idempotency_key: str) -> str:
        raise Unavailable("down")

    machine = create_machine(
        {
            "id": "shop",
            "initial": "paying",
            "states": {
                "paying": {
                    "initial": "charging",
                    "states": {
                        "charging": {
                            "invoke": {
                                "src": "charge",
                                "onDone": "#shop.done",
                                "retry": {"max_attempts": 3, "initial_interval": 1000},
                            }
                        }
                    },
                },
                "done": {"type": "final"},
            },
        },
        actors={"charge": from_callable(charge)},
    )
    clock = SimulatedClock()
    actor = create_actor(machine, clock=clock).start()
    return machine, actor


def test_a_waiting_call_is_read_by_the_vocabulary_not_by_its_names() -> None:
    _, actor = _waiting_machine()
    snapshot = actor.get_snapshot()
    leaves = snapshot.active_leaves()
    assert waits_to_retry(leaves) == {"paying.charging.waiting_to_retry"}
    assert waits_to_retry(["paying.charging.attempting", "other"]) == set()
    assert [is_retry_wait(leaf) for leaf in leaves] == [True]
    (timer,) = snapshot.timers
    assert retried_state_of_timer(timer.id) == "shop.paying.charging"
    assert retried_state_of_timer(timer.event["type"]) == "shop.paying.charging"
    assert retried_state_of_timer("xstate.after.1000.shop.paying") is None
    assert retried_state_of_timer("retry:shop.a.shop.a.waiting_to_retry") is None  # no after
    attempt, error = attempt_in_progress(snapshot.retry_records)  # type: ignore[misc]
    assert attempt == 1 and error["name"] == "Unavailable"
    assert attempt_in_progress({VISITS: {"shop.paying.charging": 1}}) is None


def test_the_expansion_keeps_the_names_stored_runs_hold() -> None:
    machine, actor = _waiting_machine()
    stored = orjson.loads(orjson.dumps(machine.persist(actor.get_snapshot())))
    assert stored["value"] == {"paying": {"charging": "waiting_to_retry"}}
    assert [t["id"] for t in stored["timers"]] == [
        "xstate.after.retry:shop.paying.charging.shop.paying.charging.waiting_to_retry"
    ]
    assert set(stored["retries"]) == {"shop.paying.charging"}
    restored = machine.restore(stored)
    assert restored.active_leaves() == ("paying.charging.waiting_to_retry",)
    charging = machine.get_state_node("shop.paying.charging")
    steps = [c.key for c in charging.children if is_retry_step(c)]
    assert steps == ["attempting", "waiting_to_retry"]
    retry, *_ = [t for t in charging.transitions if is_retry_transition(t)]
    assert retry.guard is not None and retry.guard.type == "retryAllowed"
    assert retry.guard.params == "shop.paying.charging"
