"""`Runtime.start_many`: many runs started together, each exactly as `start` makes it.

Each store kind: the runs of several batches (more than `START_BATCH`) each await an async
call that takes a moment and end with their own input as output, in input order; an input the
machine refuses starts nothing; a batch is written whole or not at all; a run whose first
step starts a child run is written as `start` writes it.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from msgspec import structs
from psycopg import sql

from benchmarks.waiting_calls import WORKFLOW, waiting_machine
from persistence.runtime import START_BATCH, START_WRITERS, Runtime
from persistence.stores import RunNotFoundError, Store, StoreError
from persistence.worker import Worker
from statecharts import Machine, create_machine

CALL_S = 0.3


def echo_machine() -> Machine:
    """One state invoking an async call of `CALL_S` that returns its input; the run's output
    is that result. An input without `x` is refused by the context function (the waiting-calls
    benchmark's workflow)."""
    return waiting_machine(CALL_S)


@pytest.fixture
def served(store: Store) -> Iterator[Runtime]:
    """A runtime of `echo_machine` on `store` with a worker serving it in a thread."""
    runtime = Runtime(store, [echo_machine()])
    worker = Worker(runtime, 2, poll_ms=20, lease_ms=5_000)
    thread = threading.Thread(target=worker.run)
    thread.start()
    yield runtime
    worker.stop()
    thread.join(timeout=30)


def wait_done(store: Store, n: int, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while store.count_runs().get("done", 0) < n:
        assert time.monotonic() < deadline, f"not all done: {store.count_runs()}"
        time.sleep(0.05)


def test_runs_of_several_batches_each_end_with_their_own_input(
    served: Runtime, store: Store
) -> None:
    n = START_BATCH * 2 + 7
    ids = served.start_many(WORKFLOW, [{"x": i} for i in range(n)])
    assert len(set(ids)) == n
    wait_done(store, n)
    for i, run_id in enumerate(ids):  # in input order, each its own
        record = served.get(run_id)
        assert (record.status, record.snapshot["output"]) == ("done", i)
    calls = [served.store.list_calls(run_id) for run_id in ids[:: START_BATCH // 2]]
    assert all(len(c) == 1 and c[0].status == "done" for c in calls)  # one call each, once


def test_an_input_the_machine_refuses_starts_nothing(served: Runtime, store: Store) -> None:
    with pytest.raises(Exception, match="'x'"):
        served.start_many(WORKFLOW, [{"x": 1}, {"y": 2}, {"x": 3}])
    assert store.count_runs() == {}


def test_a_batch_is_written_whole_or_not_at_all(store: Store) -> None:
    runtime = Runtime(store, [echo_machine()])
    (taken,) = runtime.start_many(WORKFLOW, [{"x": 0}])
    fresh, _, _ = runtime.prepare_run(WORKFLOW, {"x": 1}, None, runtime.clock.now())
    clash, outbox, _ = runtime.prepare_run(WORKFLOW, {"x": 2}, None, runtime.clock.now())
    again = structs.replace(clash, id=taken)  # an id already taken: the insert fails
    with pytest.raises(StoreError):  # (SQLite's words differ from PostgreSQL's)
        store.create_runs([(fresh, []), (again, outbox)], runtime.clock.now())
    with pytest.raises(RunNotFoundError):
        store.get_run(fresh.id)  # the batch's first run was not kept either
    assert store.count_runs() == {"active": 1}


def test_a_failed_batch_raises_and_no_batch_is_begun_after_it(store: Store) -> None:
    """Batches are written `START_WRITERS` at a time: a store failure in the third raises once
    the batch written beside it is, and no batch is taken after the failure."""
    runtime = Runtime(store, [echo_machine()])
    create_runs, lock, calls = store.create_runs, threading.Lock(), []
    third_failed = threading.Event()

    def failing_third(runs: Any, now: int) -> Any:
        with lock:
            calls.append(len(runs))
            call = len(calls)
        if call == 3:
            third_failed.set()
            raise StoreError("the server went away")
        if call > 3:  # (the batch beside the third, taken before it failed, ends after it)
            assert third_failed.wait(10)
        return create_runs(runs, now)

    store.create_runs = failing_third  # type: ignore[method-assign]
    batches = 6
    with pytest.raises(StoreError, match="went away"):
        runtime.start_many(WORKFLOW, [{"x": i} for i in range(START_BATCH * batches)])
    started = store.count_runs().get("active", 0)
    assert started % START_BATCH == 0  # each batch whole or not at all
    beside_the_third = START_WRITERS - 1
    assert 2 * START_BATCH <= started <= (2 + beside_the_third) * START_BATCH
    assert len(calls) <= 3 + beside_the_third < batches


def test_a_run_with_a_key_is_refused_naming_it(store: Store) -> None:
    runtime = Runtime(store, [echo_machine()])
    run, outbox, _ = runtime.prepare_run(WORKFLOW, {"x": 1}, "order-7", runtime.clock.now())
    with pytest.raises(ValueError, match="order-7"):
        store.create_runs([(run, outbox)], runtime.clock.now())
    assert store.count_runs() == {}


def test_a_run_whose_first_step_starts_a_child_run_is_started_too(store: Store) -> None:
    child = create_machine(
        {"id": "child", "initial": "done", "states": {"done": {"type": "final"}}}
    )
    parent = create_machine(
        {
            "id": "parent",
            "initial": "waiting",
            "context": lambda input: {"n": input},
            "states": {
                "waiting": {"invoke": {"src": "child", "onDone": "finished"}},
                "finished": {"type": "final"},
            },
        },
        actors={"child": child},
    )
    runtime = Runtime(store, [parent, child])
    ids = runtime.start_many("parent", [1, 2, 3])
    Worker(runtime).run_until_idle()
    assert [runtime.get(run_id).status for run_id in ids] == ["done"] * 3
    assert all(len(runtime.children(run_id)) == 1 for run_id in ids)


def test_ids_are_uuids(store: Store) -> None:
    runtime = Runtime(store, [echo_machine()])
    ids = runtime.start_many(WORKFLOW, ({"x": i} for i in range(3)))  # any iterable
    assert [str(uuid.UUID(run_id)) for run_id in ids] == ids
    assert {runtime.get(run_id).status for run_id in ids} == {"active"}


@pytest.mark.parametrize("store_kind", ["postgres"])
def test_a_batch_with_calls_due_wakes_the_workers_of_other_processes(
    store: Store, pg_dsn: str, pg_schema: str
) -> None:
    """Workers elsewhere LISTEN for starts: a batch whose calls no executor holds sends them
    one wake-up, in the batch's own transaction."""
    runtime = Runtime(store, [echo_machine()])
    channel = f"statecharts_wake_{pg_schema}"[:63]
    with psycopg.connect(pg_dsn, autocommit=True) as listener:
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        runtime.start_many(WORKFLOW, [{"x": i} for i in range(5)])
        heard = list(listener.notifies(timeout=10, stop_after=1))
    assert [n.channel for n in heard] == [channel]
    assert {c.status for r in runtime.list(name=WORKFLOW) for c in store.list_calls(r.id)} == {
        "pending"
    }
