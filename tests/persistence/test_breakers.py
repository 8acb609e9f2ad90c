"""Circuit breakers shared by workers through the store, on every store."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from persistence.breakers import BreakerPolicy, CircuitOpenError, SharedBreaker
from persistence.runtime import Runtime
from persistence.stores import Store
from persistence.worker import Worker
from statecharts import SimulatedClock, create_machine

StoreFactory = Callable[[], Store]
T0 = 1_700_000_000_000


def test_opens_at_the_threshold_half_opens_after_the_timeout_and_closes_on_success(
    store_factory: StoreFactory,
) -> None:
    policy = BreakerPolicy(failure_threshold=2, reset_timeout_ms=1000)
    a = SharedBreaker(store_factory(), "bank", policy)  # worker A
    b = SharedBreaker(store_factory(), "bank", policy)  # worker B, same database
    a.before_call(T0)
    a.record(False, T0)
    b.before_call(T0 + 1)  # one failure: still closed
    b.record(False, T0 + 1)  # second failure, seen through the store: opens
    for breaker in (a, b):
        with pytest.raises(CircuitOpenError) as opened:
            breaker.before_call(T0 + 500)
        assert opened.value.retry_after == 501
    a.before_call(T0 + 1001)  # half-open: A is the probe
    with pytest.raises(CircuitOpenError):
        b.before_call(T0 + 1002)  # only one probe at a time
    a.record(True, T0 + 1003)
    b.before_call(T0 + 1004)  # closed again
    record = store_factory().get_breaker("bank")
    assert record is not None and (record.state, record.failure_count) == ("closed", 0)


def test_a_failed_probe_reopens_and_a_lost_probe_is_replaced(store: Store) -> None:
    breaker = SharedBreaker(store, "crm", BreakerPolicy(failure_threshold=1, reset_timeout_ms=100))
    breaker.record(False, T0)
    breaker.before_call(T0 + 100)  # probe
    breaker.record(False, T0 + 150)  # probe failed: open again from now
    with pytest.raises(CircuitOpenError) as reopened:
        breaker.before_call(T0 + 200)
    assert reopened.value.retry_after == 50
    breaker.before_call(T0 + 250)  # probe whose worker dies without reporting
    with pytest.raises(CircuitOpenError):
        breaker.before_call(T0 + 300)
    breaker.before_call(T0 + 350)  # stale probe replaced


def test_bad_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="failure_threshold"):
        BreakerPolicy(failure_threshold=0)


def test_an_open_breaker_fails_runs_fast_across_workers(store_factory: StoreFactory) -> None:
    calls: list[Any] = []
    healthy = {"now": False}

    def bank(amount: Any) -> str:
        calls.append(amount)
        if not healthy["now"]:
            raise TimeoutError("bank did not answer")
        return "ok"

    machine = create_machine(
        {
            "id": "pay",
            "initial": "paying",
            "states": {
                "paying": {
                    "invoke": {
                        "id": "bank",
                        "src": "bank",
                        "breaker": "bank",
                        "input": lambda c, e: c["n"],
                        "onDone": "paid",
                        "onError": "failed",
                    }
                },
                "paid": {"type": "final"},
                "failed": {"type": "final"},
            },
            "context": lambda input: {"n": input},
        },
        actors={"bank": bank},
    )
    clock = SimulatedClock(T0)
    policies = {"bank": BreakerPolicy(failure_threshold=2, reset_timeout_ms=60_000)}
    workers = [
        Worker(Runtime(store_factory(), [machine], clock=clock, breakers=policies))
        for _ in range(2)
    ]
    runtime = workers[0].runtime
    first = [runtime.start("pay", n) for n in (1, 2)]
    workers[0].run_until_idle()
    third = runtime.start("pay", 3)
    workers[1].run_until_idle()  # the other worker sees the open breaker
    assert sorted(calls) == [1, 2]  # one round: the two calls ran at once
    assert [runtime.get(i).state for i in (*first, third)] == ["failed"] * 3
    error = runtime.store.list_events(third)[0].event["error"]
    assert error["name"] == "CircuitOpenError" and error["retry_after"] == 60_000
    clock.advance(60_000)
    healthy["now"] = True
    fourth = runtime.start("pay", 4)
    workers[1].run_until_idle()
    assert sorted(calls) == [1, 2, 4] and runtime.get(fourth).state == "paid"
    record = runtime.store.get_breaker("bank")
    assert record is not None and record.state == "closed"
