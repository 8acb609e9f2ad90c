"""Runs started or sent to beside a serving worker hand it their calls
(`Runtime.attach_executor`, `persistence.local_calls`).

A `Worker` serving in a process attaches its call executor to its runtime: `start`,
`start_many` and the steps of `send` there lease the calls they record to it in their commit and
hand them over once committed, as a step hands its calls to its driver's executor. No claim
takes them and no wake-up is needed; every call still runs once, with one attempt recorded
under the executor. Each store kind: the calls of runs started or sent to here are never
claimed, while those of runs started by a runtime with no worker (another process's client) are;
`start_many` hands over no more than the executor has room for, the rest left due for its
claims; a stopped worker is handed nothing; a slot a worker's schedule fires hands its run's
call to that worker's executor too.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from benchmarks.waiting_calls import WORKFLOW, waiting_machine
from persistence.calls import CallExecutor
from persistence.runtime import Runtime
from persistence.scheduling import ScheduledStart
from persistence.stores import Store
from persistence.worker import Worker
from statecharts import Machine, assign, create_machine
from tests.persistence.conftest import wait_for

CALL_S = 0.2


def echo_machine() -> Machine:
    """One state invoking an async call of `CALL_S` that returns the run's input `x`."""
    return waiting_machine(CALL_S)


@pytest.fixture
def claimed(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys of every call a claim of `store` took, in claim order."""
    keys: list[str] = []
    claim = store.claim_calls

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls = claim(*args, **kwargs)
        keys.extend(call.idempotency_key for call in calls)
        return calls

    monkeypatch.setattr(store, "claim_calls", counted)
    return keys


@contextmanager
def serving(runtime: Runtime, schedules: tuple[ScheduledStart, ...] = ()) -> Iterator[Worker]:
    """A worker serving `runtime` in a thread (ticking `schedules`), its call executor attached
    and serving."""
    worker = Worker(runtime, 2, poll_ms=20, lease_ms=5_000, schedules=list(schedules))
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_for(lambda: worker._calls is not None and worker._calls.is_alive())
        yield worker
    finally:
        worker.stop()
        thread.join(timeout=30)


@pytest.fixture
def served(store: Store) -> Iterator[tuple[Runtime, Worker]]:
    """A runtime of `echo_machine` on `store`, a worker serving it in a thread."""
    runtime = Runtime(store, [echo_machine()])
    with serving(runtime) as worker:
        yield runtime, worker


def ended_with_their_inputs(runtime: Runtime, ids: list[str], inputs: range) -> None:
    wait_for(lambda: all(runtime.get(run_id).status == "done" for run_id in ids), 60)
    assert [runtime.get(run_id).snapshot["output"] for run_id in ids] == list(inputs)


def attempts_of(store: Store, ids: list[str]) -> list[tuple[str, int, str, str | None]]:
    return [
        (a.idempotency_key, a.attempt, a.worker, a.outcome)
        for run_id in ids
        for a in store.call_attempts(run_id)
    ]


def test_the_calls_of_runs_started_beside_a_worker_are_handed_to_it_never_claimed(
    served: tuple[Runtime, Worker], store: Store, claimed: list[str]
) -> None:
    runtime, worker = served
    one_by_one = [runtime.start(WORKFLOW, {"x": i}) for i in range(10)]
    together = runtime.start_many(WORKFLOW, [{"x": i} for i in range(10, 40)])
    ids = one_by_one + together
    ended_with_their_inputs(runtime, ids, range(40))
    attempts = attempts_of(store, ids)
    assert len(attempts) == 40  # each call ran once, under the worker's executor
    assert {(n, who, outcome) for _, n, who, outcome in attempts} == {
        (1, f"{worker.id}/calls", "done")
    }
    assert not set(claimed) & {key for key, *_ in attempts}

    elsewhere = Runtime(store, [echo_machine()])  # (another process's client: no worker)
    theirs = [elsewhere.start(WORKFLOW, {"x": i}) for i in range(5)]
    ended_with_their_inputs(runtime, theirs, range(5))
    assert sorted(claimed) == sorted(key for key, *_ in attempts_of(store, theirs))


def test_the_call_a_sent_event_starts_is_handed_to_the_worker_never_claimed(
    store: Store, claimed: list[str]
) -> None:
    async def echo(x: int) -> int:
        return x

    machine = create_machine(
        {
            "id": "asked",
            "initial": "waiting",
            "context": {"got": None},
            "states": {
                "waiting": {"on": {"GO": "calling"}},
                "calling": {
                    "invoke": {
                        "src": "echo",
                        "input": lambda context, event: 5,
                        "onDone": {"target": "done", "actions": "keep"},
                    }
                },
                "done": {"type": "final"},
            },
            "output": lambda context, event: context["got"],
        },
        actors={"echo": echo},
        actions={"keep": assign({"got": lambda context, event: event["output"]})},
    )
    runtime = Runtime(store, [machine])
    with serving(runtime) as worker:
        ids = [runtime.start("asked") for _ in range(5)]
        for run_id in ids:
            runtime.send(run_id, "GO")
        wait_for(lambda: all(runtime.get(run_id).status == "done" for run_id in ids))
    assert [runtime.get(run_id).snapshot["output"] for run_id in ids] == [5] * 5
    attempts = attempts_of(store, ids)
    assert {(n, who, outcome) for _, n, who, outcome in attempts} == {
        (1, f"{worker.id}/calls", "done")
    }
    assert len(attempts) == 5 and claimed == []


def test_start_many_hands_over_no_more_calls_than_the_executor_has_room_for(
    store: Store, claimed: list[str]
) -> None:
    runtime = Runtime(store, [echo_machine()])
    executor = CallExecutor(runtime, "roomy", max_calls=10, poll_ms=20)
    runtime.attach_executor(executor)  # (not serving yet: what was handed over waits)
    ids = runtime.start_many(WORKFLOW, [{"x": i} for i in range(30)])
    calls = [call for run_id in ids for call in store.list_calls(run_id)]
    assert [(c.status, c.owner) for c in calls] == [("running", "roomy")] * 10 + [
        ("pending", None)
    ] * 20
    executor.start()
    try:
        ended_with_their_inputs(runtime, ids, range(30))
    finally:
        runtime.detach_executor(executor)
        executor.stop()
    assert len(attempts_of(store, ids)) == 30  # each once
    assert sorted(claimed) == sorted(c.idempotency_key for c in calls[10:])


def test_a_stopped_worker_is_handed_nothing(served: tuple[Runtime, Worker], store: Store) -> None:
    runtime, worker = served
    worker.stop()
    wait_for(lambda: worker._calls is not None and not worker._calls.is_alive())
    run_id = runtime.start(WORKFLOW, {"x": 7})
    assert [(c.status, c.owner) for c in store.list_calls(run_id)] == [("pending", None)]
    Worker(runtime).run_until_idle()  # (another worker claims it)
    assert runtime.get(run_id).snapshot["output"] == 7


def test_a_slot_a_worker_fires_hands_its_runs_call_to_that_workers_executor(
    store: Store, claimed: list[str]
) -> None:
    runtime = Runtime(store, [echo_machine()])
    # every minute, its first tick firing the latest slot: at once
    schedule = ScheduledStart(
        runtime, "each-minute", WORKFLOW, "* * * * *", input={"x": 4}, grace_ms=60_000
    )
    with serving(runtime, (schedule,)) as worker:
        wait_for(lambda: bool(runtime.list()), 30)
        ids = [run.id for run in runtime.list()]  # (two, should the test cross a minute)
        wait_for(lambda: all(runtime.get(run_id).status == "done" for run_id in ids), 60)
    assert {runtime.get(run_id).snapshot["output"] for run_id in ids} == {4}
    attempts = attempts_of(store, ids)
    assert len(attempts) == len(ids)  # each call ran once, under the worker's executor
    assert {(n, who, outcome) for _, n, who, outcome in attempts} == {
        (1, f"{worker.id}/calls", "done")
    }
    assert claimed == []


def test_a_worker_whose_executor_would_not_start_is_handed_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = Runtime(store, [echo_machine()])

    def refuses(self: CallExecutor) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(CallExecutor, "start", refuses)
    refused, raised = Worker(runtime, poll_ms=20), []

    def run() -> None:  # (in a thread: `run` in the main thread would take pytest's signals)
        try:
            refused.run()
        except RuntimeError as exc:
            raised.append(str(exc))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    refused.stop()  # (its heartbeat thread had started)
    assert raised == ["can't start new thread"]
    monkeypatch.undo()
    run_id = runtime.start(WORKFLOW, {"x": 3})  # (no executor of that worker holds its call)
    assert [(c.status, c.owner) for c in store.list_calls(run_id)] == [("pending", None)]
    Worker(runtime).run_until_idle()
    assert runtime.get(run_id).snapshot["output"] == 3
