"""Retries as visible, durable states (issue 5, engine side)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statecharts import (
    MachineDefinitionError,
    SimulatedClock,
    assign,
    create_actor,
    create_machine,
    from_callable,
)
from statecharts.retry_policy import RetriesExhausted, RetryPolicy, with_retry


class Unavailable(Exception):
    """A retryable downstream failure."""


class Declined(Exception):
    """A business error: never retried."""


class SlowDown(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__("slow down")
        self.retry_after = retry_after


def run_until_settled(
    retry: dict[str, Any], failures: list[Exception], on_error: bool = True
) -> tuple[Any, list[int], list[str]]:
    """Run an invoice-like machine whose call fails with ``failures`` in turn, then succeeds;
    return the final snapshot, the times of each attempt and the idempotency keys seen."""
    clock = SimulatedClock()
    times: list[int] = []
    keys: list[str] = []

    def call(input: Any, idempotency_key: str) -> str:
        times.append(clock.now())
        keys.append(idempotency_key)
        if len(times) <= len(failures):
            raise failures[len(times) - 1]
        return "INV-1"

    invoke: dict[str, Any] = {"src": "create_invoice", "retry": retry, "onDone": "sent"}
    if on_error:
        invoke["onError"] = "failed"
    machine = create_machine(
        {
            "id": "invoice",
            "initial": "creating",
            "states": {
                "creating": {"invoke": invoke},
                "sent": {"type": "final"},
                "failed": {"type": "final"},
            },
        },
        actors={"create_invoice": from_callable(call)},
    )
    actor = create_actor(machine, clock=clock).start()
    clock.advance(10 * 60 * 1000)
    return actor.get_snapshot(), times, keys


@pytest.mark.parametrize(
    ("backoff", "expected_times"),
    [
        ("fixed", [0, 1000, 2000, 3000]),
        ("linear", [0, 1000, 3000, 6000]),
        ("exponential", [0, 1000, 3000, 7000]),
    ],
)
def test_exact_wait_sequences(backoff: str, expected_times: list[int]) -> None:
    snapshot, times, keys = run_until_settled(
        {"max_attempts": 4, "initial_interval": 1000, "backoff": backoff}, [Unavailable()] * 3
    )
    assert snapshot.value == "sent"
    assert times == expected_times
    assert len(set(keys)) == 1, "one idempotency key for every retry of the call"


def test_max_interval_caps_the_wait() -> None:
    _, times, _ = run_until_settled(
        {
            "max_attempts": 5,
            "initial_interval": 1000,
            "backoff": "exponential",
            "max_interval": 2500,
        },
        [Unavailable()] * 4,
    )
    assert [b - a for a, b in itertools.pairwise(times)] == [1000, 2000, 2500, 2500]


def test_retry_after_overrides_the_wait() -> None:
    _, times, _ = run_until_settled(
        {"max_attempts": 3, "initial_interval": 1000}, [SlowDown(retry_after=7000)]
    )
    assert times == [0, 7000]


def test_non_retryable_error_goes_straight_to_the_error_path() -> None:
    snapshot, times, _ = run_until_settled(
        {"max_attempts": 5, "non_retryable": ["Declined"]}, [Declined("card declined")]
    )
    assert snapshot.value == "failed"
    assert times == [0]


def test_retry_on_limits_retries_to_named_errors() -> None:
    snapshot, times, _ = run_until_settled(
        {"max_attempts": 5, "retry_on": ["Unavailable"]}, [KeyError("x")]
    )
    assert snapshot.value == "failed" and times == [0]


def test_max_attempts_reached_goes_to_on_error() -> None:
    snapshot, times, _ = run_until_settled(
        {"max_attempts": 3, "initial_interval": 10, "backoff": "fixed"}, [Unavailable()] * 9
    )
    assert snapshot.value == "failed"
    assert times == [0, 10, 20]


def test_max_attempts_reached_without_on_error_fails_the_machine() -> None:
    snapshot, _, _ = run_until_settled(
        {"max_attempts": 2, "initial_interval": 10}, [Unavailable("down")] * 9, on_error=False
    )
    assert snapshot.status == "error"
    assert snapshot.error["name"] == "Unavailable"


def test_attempts_and_last_error_live_in_the_snapshot_while_waiting() -> None:
    clock = SimulatedClock()
    machine = create_machine(
        {
            "id": "m",
            "initial": "calling",
            "states": {
                "calling": {
                    "invoke": {
                        "src": "f",
                        "retry": {"max_attempts": 3, "initial_interval": 500},
                        "onDone": "ok",
                        "onError": "ko",
                    }
                },
                "ok": {},
                "ko": {},
            },
        },
        actors={"f": from_callable(lambda i: (_ for _ in ()).throw(Unavailable("503")))},
    )
    actor = create_actor(machine, clock=clock).start()
    snapshot = actor.get_snapshot()
    assert snapshot.value == {"calling": "waiting_to_retry"}
    record = snapshot.retries["m.calling"]
    assert record["attempt"] == 1
    assert record["last_error"]["message"] == "503"
    assert snapshot.has_tag("retrying")
    assert snapshot.timers[0].due_at == 500


def test_skip_goes_on_and_records_the_skipped_item() -> None:
    clock = SimulatedClock()
    machine = create_machine(
        {
            "id": "batch",
            "initial": "task",
            "states": {
                "task": {
                    "invoke": {
                        "src": "crm",
                        "retry": {"max_attempts": 2, "initial_interval": 100},
                        "onFinalFailure": "skip",
                        "onDone": "next",
                    }
                },
                "next": {"type": "final"},
            },
        },
        actors={"crm": from_callable(lambda i: (_ for _ in ()).throw(Unavailable("crm")))},
    )
    actor = create_actor(machine, clock=clock).start()
    clock.advance(1000)
    snapshot = actor.get_snapshot()
    assert snapshot.status == "done"
    assert [dict(item) | {"error": item["error"]["name"]} for item in snapshot.skipped] == [
        {
            "state": "batch.task",
            "invoke": "batch.task:invocation[0]",
            "attempts": 2,
            "error": "Unavailable",
        }
    ]


def test_on_final_failure_skip_works_without_retry() -> None:
    """Issue 44: ``onFinalFailure: "skip"`` on a call without ``retry`` was ignored (the mail
    failure failed the order); it skips the one attempt and goes on along onDone."""
    machine = create_machine(
        {
            "id": "order",
            "initial": "mailing",
            "states": {
                "mailing": {
                    "invoke": {
                        "id": "mail",
                        "src": "mail",
                        "onFinalFailure": "skip",
                        "onDone": "shipped",
                    }
                },
                "shipped": {"type": "final"},
            },
        },
        actors={"mail": from_callable(lambda i: (_ for _ in ()).throw(Unavailable("smtp")))},
    )
    snapshot = create_actor(machine).start().get_snapshot()
    assert (snapshot.status, snapshot.value) == ("done", "shipped")
    assert [dict(item) | {"error": item["error"]["name"]} for item in snapshot.skipped] == [
        {"state": "order.mailing", "invoke": "mail", "attempts": 1, "error": "Unavailable"}
    ]


def test_on_final_failure_skip_without_retry_still_needs_on_done() -> None:
    with pytest.raises(
        MachineDefinitionError,
        match=r"states\.mailing\.invoke\.onFinalFailure: "
        r"'skip' goes on along onDone; add onDone",
    ):
        create_machine(
            {
                "id": "order",
                "initial": "mailing",
                "states": {"mailing": {"invoke": {"src": "mail", "onFinalFailure": "skip"}}},
            },
            actors={"mail": from_callable(lambda i: 1)},
        )


def test_invalid_retry_policy_is_a_definition_error_with_its_path() -> None:
    with pytest.raises(
        MachineDefinitionError, match=r"states\.a\.invoke\.retry: .*backoff: one of"
    ):
        create_machine(
            {
                "initial": "a",
                "states": {"a": {"invoke": {"src": "f", "retry": {"backoff": "sometimes"}}}},
            },
            actors={"f": from_callable(lambda i: 1)},
        )


@given(attempt=st.integers(1, 20), initial=st.integers(0, 10_000), key=st.text(max_size=8))
def test_full_jitter_stays_within_zero_and_the_capped_backoff(
    attempt: int, initial: int, key: str
) -> None:
    policy = RetryPolicy(
        max_attempts=30,
        initial_interval=initial,
        backoff="exponential",
        max_interval=60_000,
        jitter="full",
    )
    wait = policy.delay_for(attempt, None, key)
    assert 0 <= wait <= policy.base_wait(attempt) <= 60_000
    assert wait == policy.delay_for(attempt, None, key), "deterministic for the same call"


def test_with_retry_shares_the_policy_for_plain_calls() -> None:
    slept: list[float] = []
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise Unavailable()
        return "ok"

    policy = RetryPolicy(max_attempts=3, initial_interval=200, backoff="linear")
    assert with_retry(flaky, policy, sleep=slept.append, now=lambda: 0) == "ok"
    assert slept == [0.2, 0.4]
    with pytest.raises(RetriesExhausted):
        with_retry(
            lambda: (_ for _ in ()).throw(Unavailable()), policy, sleep=slept.append, now=lambda: 0
        )
    with pytest.raises(Declined):
        with_retry(
            lambda: (_ for _ in ()).throw(Declined()),
            RetryPolicy(non_retryable=("Declined",)),
            sleep=slept.append,
            now=lambda: 0,
        )


def test_each_visit_of_a_retried_state_gets_its_own_key_even_in_the_same_millisecond() -> None:
    """A loop over items enters the same retried call site again at the same instant: a
    payments API must see two calls, not a retry of one."""
    keys: list[str] = []

    def charge(input: Any, idempotency_key: str) -> str:
        keys.append(idempotency_key)
        return "ok"

    machine = create_machine(
        {
            "id": "loop",
            "initial": "charging",
            "context": {"left": 2},
            "states": {
                "charging": {
                    "invoke": {
                        "src": "charge",
                        "retry": {"max_attempts": 2},
                        "onDone": {
                            "target": "next",
                            "actions": assign({"left": lambda c, e: c["left"] - 1}),
                        },
                    }
                },
                "next": {
                    "always": [
                        {"guard": lambda c, e: c["left"] > 0, "target": "charging"},
                        {"target": "done"},
                    ]
                },
                "done": {"type": "final"},
            },
        },
        actors={"charge": from_callable(charge)},
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    assert actor.get_snapshot().status == "done"
    assert len(keys) == 2 and keys[0] != keys[1]
    data = actor.get_persisted_snapshot()
    assert data["retry_visits"] == {"loop.charging": 2}
    assert machine.restore(data).retries == {}


def test_a_child_machine_failing_with_a_text_reason_is_retried_then_takes_on_error() -> None:
    starts: list[int] = []
    clock = SimulatedClock()
    child = create_machine(
        {
            "id": "check",
            "initial": "rejected",
            "entry": "count",
            "states": {"rejected": {"type": "final", "failure": "card stolen"}},
        },
        actions={"count": lambda *_: starts.append(clock.now())},
    )
    parent = create_machine(
        {
            "id": "pay",
            "initial": "checking",
            "states": {
                "checking": {
                    "invoke": {
                        "src": "check",
                        "onDone": "paid",
                        "onError": "refused",
                        "retry": {"max_attempts": 3, "initial_interval": 100, "backoff": "fixed"},
                    }
                },
                "paid": {"type": "final"},
                "refused": {"type": "final"},
            },
        },
        actors={"check": child},
    )
    actor = create_actor(parent, clock=clock).start()
    clock.advance(10_000)
    assert actor.get_snapshot().value == "refused"
    assert starts == [0, 100, 200], "text errors carry no names, so every attempt is made"
