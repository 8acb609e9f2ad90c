"""A call leased to a call executor keeps its lease while it waits to start, and while its
end waits to be recorded.

A step leases the calls it records to its worker's executor, which starts them from its
serving loop; the loop also records each ended call with the step that applies its result,
and that write waits for its run's row. Here that row is held by another transaction (as a
slow commit, or a machine under load, would hold it), so the loop is stalled on an ended call
with another call handed to it: the executor's heartbeat thread must keep renewing that
call's lease, so that no other worker takes it over and runs it beside this one (test_crash
saw two processes inside one run's effects under load), and the stalled call's lease too: it
already ran, and a lapsed lease let another worker run it a second time (the per-tenant limits
soak on SQLite saw two calls run twice; see `CallExecutor._recording`). PostgreSQL:
row locks stall the one loop and leave the heartbeat's rows free (SQLite's single writer would
stall both).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from persistence.calls import CallExecutor
from persistence.runtime import Runtime
from persistence.stores import Store, StoreUnavailableError
from statecharts import Machine, create_machine
from tests.persistence.conftest import wait_for

LEASE_MS = 1_000


@pytest.mark.parametrize("store_kind", ["postgres"])
def test_a_call_waiting_in_a_stalled_executor_is_not_taken_over(
    store: Store, pg_dsn: str, pg_schema: str
) -> None:
    release_first = threading.Event()
    ran: list[str] = []

    def work(name: str, idempotency_key: str = "") -> str:
        ran.append(name)
        if name == "first":
            release_first.wait(30)
        return name

    machine = _job(work)
    runtime = Runtime(store, [machine])
    executor = CallExecutor(runtime, "A", lease_ms=LEASE_MS, poll_ms=20)
    first = runtime.start("job", {"name": "first"})
    executor.start()
    try:
        wait_for(lambda: ran == ["first"], 30)
        with psycopg.connect(pg_dsn) as holder:  # the first run's row, held
            holder.execute(f'SET search_path TO "{pg_schema}"')
            holder.execute("SELECT 1 FROM workflow_runs WHERE id = %s FOR UPDATE", (first,))
            release_first.set()  # its end is recorded with its run's step: the loop waits
            second = runtime.start("job", {"name": "second"})
            (call,) = store.claim_calls("A", runtime.clock.now(), LEASE_MS, 1)
            executor.adopt([call], store.get_run(second), machine)  # as a step leases it
            time.sleep(3 * LEASE_MS / 1000)  # (three leases, renewed by the heartbeat)
            taken = store.claim_calls("B", runtime.clock.now(), LEASE_MS, 10, run_id=second)
            retaken = store.claim_calls("B", runtime.clock.now(), LEASE_MS, 10, run_id=first)
            holder.rollback()
        assert taken == [], "another worker took over a call waiting in a live executor"
        assert retaken == [], "another worker took over a call whose end was being recorded"
        wait_for(lambda: {store.get_run(r).status for r in (first, second)} == {"done"}, 30)
        assert ran == ["first", "second"]
        for run_id in (first, second):
            attempts = [(a.worker, a.outcome) for a in store.call_attempts(run_id)]
            assert attempts == [("A", "done")]
    finally:
        release_first.set()
        executor.stop()


@pytest.mark.parametrize("store_kind", ["postgres"])
def test_a_heartbeat_never_waits_for_a_call_row_another_transaction_holds(
    store: Store, pg_dsn: str, pg_schema: str
) -> None:
    """A heartbeat renews its calls while another transaction holds one of their rows (as a
    burst of call ends being written holds them, in its own order): it skips that row and
    still reports the call held, instead of waiting. It used to wait, the two deadlocked, and
    the deadlock timeout let leases run out under load (test_crash saw the overlap)."""
    machine = create_machine(
        {
            "id": "job",
            "initial": "working",
            "states": {
                "working": {"invoke": {"src": "work", "onDone": "done"}},
                "done": {"type": "final"},
            },
        },
        actors={"work": lambda: None},
    )
    runtime = Runtime(store, [machine])
    held, free = (runtime.start("job") for _ in range(2))
    calls = {c.run_id: c for c in store.claim_calls("A", runtime.clock.now(), LEASE_MS, 10)}
    keys = {calls[held].idempotency_key: None, calls[free].idempotency_key: None}
    with psycopg.connect(pg_dsn) as holder:
        holder.execute(f'SET search_path TO "{pg_schema}"')
        holder.execute(
            "SELECT 1 FROM workflow_calls WHERE idempotency_key = %s FOR UPDATE",
            (calls[held].idempotency_key,),
        )
        later = runtime.clock.now() + LEASE_MS
        answer: list[set[str]] = []
        beat = threading.Thread(
            target=lambda: answer.append(store.heartbeat_calls("A", keys, later, LEASE_MS))
        )
        beat.start()
        beat.join(10)
        waited = beat.is_alive()
        holder.rollback()
    beat.join(30)
    assert not waited, "the heartbeat waited for the row another transaction holds"
    assert answer == [set(keys)], "a call reported lost while still held"
    renewed = {c.run_id: c.lease_expires_at for c in store.list_calls(free)}
    assert renewed[free] == later + LEASE_MS  # the free row renewed; the held one skipped


def test_calls_the_store_failed_to_start_are_started_when_it_answers_again(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database goes away between a claim and the calls' start (test_faults kills the
    worker's connections): the executor could neither read the calls' runs nor write that it
    let them go. It used to drop the calls it had not started while keeping them held: their
    leases renewed for ever, never run, their runs never moved (test_faults hung about one run
    in six under load). They are started at a later look, each once."""
    ran: list[str] = []

    def work(name: str) -> str:
        ran.append(name)
        return name

    machine = _job(work)
    runtime = Runtime(store, [machine])
    ids = [runtime.start("job", {"name": f"n{i}"}) for i in range(3)]
    # once each, in the serving loop (a call whose run could not be read was let go as if
    # its run were gone: `retry_call`, which failed too)
    failing = {"get_runs": 1, "get_run": 1, "retry_call": 1}
    for name in failing:
        monkeypatch.setattr(store, name, _failing_once(getattr(store, name), name, failing))
    executor = CallExecutor(runtime, "A", lease_ms=LEASE_MS, poll_ms=50)
    executor.start()
    try:
        wait_for(lambda: {store.get_run(r).status for r in ids} == {"done"}, 20)
    finally:
        executor.stop()
    assert failing["get_runs"] == failing["get_run"] == 0  # the store did fail
    assert sorted(ran) == ["n0", "n1", "n2"]
    for run_id in ids:
        assert [(a.worker, a.outcome) for a in store.call_attempts(run_id)] == [("A", "done")]


def _job(work: Callable[..., str]) -> Machine:
    """A run named by its input's `name` that invokes `work` with it and ends when it
    returns."""
    return create_machine(
        {
            "id": "job",
            "initial": "working",
            "context": lambda input: {"name": input["name"]},
            "states": {
                "working": {
                    "invoke": {"src": "work", "input": lambda c, e: c["name"], "onDone": "done"}
                },
                "done": {"type": "final"},
            },
        },
        actors={"work": work},
    )


def _failing_once(method: Any, name: str, failing: dict[str, int]) -> Any:
    """`method`, raising `StoreUnavailableError` in the executor's serving thread while
    `failing[name]` is above zero (counted down)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == "calls" and failing[name] > 0:
            failing[name] -= 1
            raise StoreUnavailableError(f"{name}: the database went away (a test's fault)")
        return method(*args, **kwargs)

    return call
