"""The claim-free step of a queued event (`RunStore.read_work`, `StepCommit.unleased`, runs
read at rest stepped by `RunDriver.drive`): written only while nobody holds the run and only at
the version read, taking the lease in its commit when effects follow; races and stale writers,
on every store. The runtimes here queue every event (`step_in_send=False`), as a run not at rest
gets it (a send to a run at rest applies it itself: tests/persistence/test_send_step.py)."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

import pytest

from persistence.driver import RunDriver
from persistence.runtime import Runtime
from persistence.stores import (
    ConflictError,
    JournalEntry,
    NewEffect,
    NewRun,
    PendingWork,
    RunRecord,
    StepCommit,
    Store,
)
from persistence.stores.rules import call_key
from persistence.worker import Worker
from statecharts import SimulatedClock, create_machine
from tests.persistence.conftest import wait_for
from tests.persistence.workflows import approval, paying

T0 = 1_700_000_000_000


def waiting_run(store: Store) -> str:
    run, _ = store.create_run(
        NewRun(
            id=str(uuid.uuid4()),
            workflow_name="w",
            workflow_version="v1",
            key=None,
            state="waiting",
            snapshot={"value": "waiting"},
            wake_at=None,
        ),
        (),
        T0,
    )
    return run.id


def unleased(store: Store, run_id: str, owner: str, **kw: Any) -> int:
    ((run, work),) = store.read_work([run_id])
    commit = StepCommit(
        run_id=run_id,
        owner=owner,
        expected_version=kw.pop("version", run.version),
        state="next",
        snapshot={"value": "next"},
        status="active",
        unleased=True,
        consumed_inbox=[e.id for e in work.inbox],
        lease_until=T0 + 30_000,
        journal=[JournalEntry(e.event, "waiting", "next") for e in work.inbox],
        **kw,
    )
    return store.commit_step(commit, T0 + 10)


def test_read_work_reads_runs_with_their_queued_events_without_a_lease(store: Store) -> None:
    run_id = waiting_run(store)
    store.send_event(run_id, {"type": "GO"}, T0)
    assert store.read_work([str(uuid.uuid4())]) == []
    ((run, work),) = store.read_work([run_id])
    assert (run.id, run.lease_owner, run.version, run.claim_count) == (run_id, None, 1, 0)
    assert [e.event for e in work.inbox] == [{"type": "GO"}] and work.effects == []
    assert store.get_run(run_id).lease_owner is None


def test_an_unleased_step_is_written_only_while_nobody_holds_the_run(store: Store) -> None:
    run_id = waiting_run(store)
    store.send_event(run_id, {"type": "GO"}, T0)
    (held,) = store.claim_runs("holder", T0, 30_000, 10)
    with pytest.raises(ConflictError):
        unleased(store, run_id, "w2")
    assert store.get_run(run_id).state == "waiting" and store.list_events(run_id) == []
    assert store.release(run_id, "holder", None)
    assert unleased(store, run_id, "w2") == held.version + 1
    run = store.get_run(run_id)
    assert (run.state, run.lease_owner, run.claim_count) == ("next", None, 1)  # no claim of w2
    assert store.pending_events(run_id) == []
    assert [e.event for e in store.list_events(run_id)] == [{"type": "GO"}]


def test_of_two_unleased_steps_from_one_version_only_the_first_is_written(
    store: Store,
) -> None:
    run_id = waiting_run(store)
    store.send_event(run_id, {"type": "GO"}, T0)
    assert unleased(store, run_id, "a") == 2
    with pytest.raises(ConflictError):  # the stale writer computed from version 1
        unleased(store, run_id, "b", version=1)
    assert store.get_run(run_id).version == 2
    assert len(store.list_events(run_id)) == 1


def test_an_unleased_step_that_leaves_effects_takes_the_lease_with_its_commit(
    store: Store,
) -> None:
    run_id = waiting_run(store)
    store.send_event(run_id, {"type": "GO"}, T0)
    version = unleased(
        store,
        run_id,
        "w1",
        release=False,
        new_effects=[NewEffect(0, "start_child", {"id": "call"})],
    )
    run = store.get_run(run_id)
    assert (run.lease_owner, run.lease_expires_at, run.wake_at, run.claim_count) == (
        "w1",
        T0 + 30_000,
        T0 + 30_000,
        1,
    )
    assert store.claim_runs("w2", T0 + 1000, 30_000, 10) == []
    assert [(e.step, e.status) for e in store.list_effects(run_id)] == [(version, "pending")]
    with pytest.raises(ConflictError):  # another unleased step finds it held
        unleased(store, run_id, "w2")


def test_an_unleased_step_of_a_run_cancelled_meanwhile_writes_nothing(store: Store) -> None:
    run_id = waiting_run(store)
    store.send_event(run_id, {"type": "GO"}, T0)
    ((run, _),) = store.read_work([run_id])
    assert store.cancel_run(run_id, T0) == "cancelled"
    with pytest.raises(ConflictError):
        unleased(store, run_id, "w1", version=run.version)
    assert store.get_run(run_id).status == "cancelled"


# -- the driver and the worker --------------------------------------------------------------

calls: list[str] = []


def call(input: Any, idempotency_key: str) -> str:
    calls.append(idempotency_key)
    return "ok"


caller = create_machine(
    {
        "id": "caller",
        "initial": "waiting",
        "states": {
            "waiting": {"on": {"GO": "calling"}},
            "calling": {"invoke": {"id": "call", "src": "call", "onDone": "done"}},
            "done": {"type": "final"},
        },
    },
    actors={"call": call},
)


def idle_worker(runtime: Runtime, **options: Any) -> tuple[Worker, threading.Thread]:
    """A worker thread that claimed what there was (nothing) and polls no more in this test:
    from then on only wake-ups move it. (PostgreSQL's listener wakes the workers once when it
    has connected, for what it may have missed: that claim is waited for too.)"""
    worker, claims = Worker(runtime, poll_ms=60_000, **options), []
    claim_work = runtime.store.claim_work

    def counted(*args: Any, **kwargs: Any) -> Any:
        try:
            return claim_work(*args, **kwargs)
        finally:
            claims.append(time.monotonic())

    runtime.store.claim_work = counted  # type: ignore[method-assign]
    thread = threading.Thread(target=worker.run)
    thread.start()
    listens = runtime.store.dialect == "postgres"
    wait_for(
        lambda: (
            bool(claims)
            and (not listens or runtime.store.wakeup().unnamed() > 0)
            and time.monotonic() - claims[-1] > 0.5
        )
    )
    return worker, thread


def test_an_idle_worker_steps_a_sent_event_without_a_claim(store: Store) -> None:
    runtime = Runtime(store, [approval], step_in_send=False)
    run_id = runtime.start("approval")  # asleep on a timer a day away: nothing to claim
    worker, thread = idle_worker(runtime)
    try:
        runtime.send(run_id, {"type": "APPROVE", "by": "ann"})
        wait_for(lambda: runtime.get(run_id).status == "done")
    finally:
        worker.stop()
        thread.join(timeout=30)
    run = runtime.get(run_id)
    assert (run.state, run.claim_count, run.lease_owner) == ("approved", 0, None)
    assert runtime.snapshot(run_id).context["approved_by"] == "ann"
    assert [e.event["type"] for e in store.list_events(run_id)] == ["APPROVE"]


def test_an_event_whose_step_calls_a_function_leases_the_call_in_that_commit(
    store: Store,
) -> None:
    calls.clear()
    runtime = Runtime(store, [caller], step_in_send=False)
    run_id = runtime.start("caller")
    assert Worker(runtime).run_until_idle() == 0  # waits for GO
    worker, thread = idle_worker(runtime)
    try:
        runtime.send(run_id, "GO")
        wait_for(lambda: runtime.get(run_id).status == "done")
    finally:
        worker.stop()
        thread.join(timeout=30)
    run = runtime.get(run_id)
    assert calls == [call_key(f"{run_id}:2:0")]  # once, with the key of the step that recorded it
    # the call runs beside the run: that commit leased the call (not the run) to the worker's
    # executor, which ran it in its first attempt; the run was never claimed
    assert (run.claim_count, run.lease_owner, run.version) == (0, None, 3)
    assert store.list_effects(run_id) == []
    assert [(c.status, c.attempt) for c in store.list_calls(run_id)] == [("done", 1)]
    assert [(a.worker, a.outcome) for a in store.call_attempts(run_id)] == [
        (f"{worker.id}/calls", "done")
    ]


def slow_guard(context: Any, event: Any) -> bool:
    time.sleep(0.5)  # a step longer than a heartbeat's period
    return True


slow = create_machine(
    {
        "id": "slow",
        "initial": "waiting",
        "states": {"waiting": {"on": {"GO": {"guard": "slow", "target": "moved"}}}, "moved": {}},
    },
    guards={"slow": slow_guard},
)


def test_a_heartbeat_during_an_unleased_step_reports_no_lost_lease(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = Runtime(store, [slow], step_in_send=False)
    run_id = runtime.start("slow")
    worker, thread = idle_worker(runtime, lease_ms=300)  # a heartbeat every 100 ms
    try:
        with caplog.at_level(logging.WARNING, logger="statecharts"):
            runtime.send(run_id, "GO")
            wait_for(lambda: runtime.get(run_id).state == "moved")
    finally:
        worker.stop()
        thread.join(timeout=30)
    assert runtime.get(run_id).claim_count == 0  # stepped without a lease, as meant
    assert "lease lost" not in caplog.text, caplog.text


def drive_read(driver: RunDriver, found: list[tuple[RunRecord, PendingWork]]) -> tuple[int, bool]:
    """`driver` steps the runs `found` at rest, as a worker steps the runs events named: the
    steps it committed and whether a run was left to a claim."""
    drove = driver.drive(driver.planner.unleased(found), lambda: False)
    return drove.steps, drove.left_to_claim


def test_racing_unleased_drivers_apply_an_event_once_and_the_loser_stays_quiet(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    clock = SimulatedClock(T0)
    runtime = Runtime(store, [approval], clock=clock, step_in_send=False)
    run_id = runtime.start("approval")
    runtime.send(run_id, {"type": "APPROVE", "by": "a"})
    first, second = (RunDriver(runtime, owner, 30_000) for owner in ("a", "b"))
    read_by_first, read_by_second = store.read_work([run_id]), store.read_work([run_id])
    assert drive_read(first, read_by_first) == (1, False)
    with caplog.at_level(logging.INFO):
        # the loser writes nothing and claims at once: an event queued meanwhile, whose
        # wake-up it took, is not left waiting for a poll
        assert drive_read(second, read_by_second) == (0, True)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    run = runtime.get(run_id)
    assert (run.state, run.version, run.claim_count) == ("approved", 2, 0)
    assert len(store.list_events(run_id)) == 1


def test_an_unleased_step_loses_to_a_claim_that_stepped_the_run_meanwhile(
    store: Store,
) -> None:
    clock = SimulatedClock(T0)
    runtime = Runtime(store, [approval], clock=clock, step_in_send=False)
    run_id = runtime.start("approval")
    runtime.send(run_id, {"type": "REJECT"})
    stale = store.read_work([run_id])
    assert Worker(runtime).run_until_idle() == 1  # a claim stepped it
    assert drive_read(RunDriver(runtime, "late", 30_000), stale) == (0, True)
    run = runtime.get(run_id)
    assert (run.state, run.version, run.claim_count) == ("rejected", 2, 1)
    assert len(store.list_events(run_id)) == 1


def test_runs_that_do_not_qualify_are_left_to_a_claim(store: Store) -> None:
    clock = SimulatedClock(T0)
    runtime = Runtime(store, [approval, paying], clock=clock, step_in_send=False)
    held = runtime.start("approval")
    runtime.send(held, "APPROVE")
    store.claim_runs("holder", clock.now(), 30_000, 10)  # a worker holds it
    # its start left an action to execute in its step (an effect): that needs a lease
    pending = runtime.start("order")
    assert [e.kind for e in store.list_effects(pending)] == ["action"]
    driver = RunDriver(runtime, "w", 30_000)
    for run_id in (held, pending):
        assert drive_read(driver, store.read_work([run_id])) == (0, True)
    assert runtime.get(held).state == "waiting" and runtime.get(held).lease_owner == "holder"
    assert runtime.get(pending).version == 1


def test_a_run_that_does_not_restore_is_failed_by_the_claim_not_the_unleased_read(
    store: Store,
) -> None:
    clock = SimulatedClock(T0)
    runtime = Runtime(store, [approval], clock=clock, step_in_send=False)
    bad = runtime.start("approval")
    version = store.claim_runs("tamper", clock.now() + 86_400_000, 1000, 1)[0].version
    broken = {**runtime.get(bad).snapshot, "value": "no_such_state"}
    store.commit_step(
        StepCommit(
            run_id=bad,
            owner="tamper",
            expected_version=version,
            state="?",
            snapshot=broken,
            status="active",
        ),
        clock.now(),
    )
    runtime.send(bad, "APPROVE")
    driver = RunDriver(runtime, "w", 30_000)
    assert drive_read(driver, store.read_work([bad])) == (0, True)
    assert runtime.get(bad).status == "active"  # untouched: not leased, not ours to fail
    Worker(runtime).run_until_idle()  # the claim that follows fails it, under its lease
    failed = runtime.get(bad)
    assert failed.status == "error" and "snapshot does not restore" in (failed.last_error or "")
    assert failed.snapshot == broken and len(store.dead_letters(bad)) == 1
