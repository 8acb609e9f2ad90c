"""Runtime + Worker against every store: runs, effects, timers, events, cancel, faults."""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from persistence.inline import Inline
from persistence.outbox import current_idempotency_key
from persistence.runtime import Runtime, UnknownWorkflowError
from persistence.stores import ConflictError, RunFinishedError, StepCommit, Store
from persistence.stores.rules import call_key
from persistence.worker import Worker
from statecharts import SimulatedClock, assign, create_machine
from tests.persistence import workflows
from tests.persistence.workflows import LEDGER_ENV, approval, init_ledger, order, paying

StoreFactory = Callable[[], Store]
DAY = 86_400_000


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[sqlite3.Connection]:
    path = str(tmp_path / "ledger.db")
    init_ledger(path)
    monkeypatch.setenv(LEDGER_ENV, path)
    db = sqlite3.connect(path)
    yield db
    db.close()


@pytest.fixture
def clock() -> SimulatedClock:
    return SimulatedClock(1_700_000_000_000)


def drain(worker: Worker, clock: SimulatedClock, step_ms: int = 50, rounds: int = 20) -> None:
    """Run until idle, moving the clock so short timers come due."""
    for _ in range(rounds):
        worker.run_until_idle()
        clock.advance(step_ms)


def test_a_multi_step_workflow_runs_each_side_effect_once(
    store: Store, ledger: sqlite3.Connection, clock: SimulatedClock
) -> None:
    runtime = Runtime(store, [order], clock=clock)
    emitted: list[Any] = []
    runtime.on("order.shipped", emitted.append)
    ids = [runtime.start("order", {"amount": n}) for n in (5, 7)]
    assert [runtime.get(i).state for i in ids] == ["charging", "charging"]
    drain(Worker(runtime, lease_ms=5000), clock)
    for run_id, amount in zip(ids, (5, 7)):
        run = runtime.get(run_id)
        assert (run.status, run.state, run.lease_owner, run.wake_at) == (
            "done",
            "shipped",
            None,
            None,
        )
        assert run.completed_at is not None
        snap = runtime.snapshot(run_id)
        assert snap.context["receipt"] == call_key(f"{run_id}:1:0")
        assert snap.context["amount"] == amount
        effects = store.list_effects(run_id)
        assert [(e.kind, e.status) for e in effects] == [("action", "done"), ("emit", "done")]
        # the invoked functions are calls beside the run: each done in one attempt
        assert [(c.call_id, c.status, c.attempt) for c in store.list_calls(run_id)] == [
            ("charge", "done", 1),
            ("reserve", "done", 1),
            ("ship", "done", 1),
        ]
        assert [a.outcome for a in store.call_attempts(run_id)] == ["done"] * 3
        journal = [e.event["type"] for e in store.list_events(run_id)]
        assert journal == [
            "xstate.done.actor.charge",
            "xstate.done.actor.reserve",
            "xstate.after.30.order.cooling",
            "xstate.done.actor.ship",
        ]
    calls = ledger.execute("SELECT name, key FROM calls ORDER BY rowid").fetchall()
    assert len(calls) == 8 and len({k for _, k in calls}) == 8
    assert sorted(a for (a,) in ledger.execute("SELECT amount FROM charges")) == [5, 7]
    assert sorted(e["amount"] for e in emitted) == [5, 7]


def test_idempotent_start_and_unknown_workflow(store: Store, clock: SimulatedClock) -> None:
    runtime = Runtime(store, [approval], clock=clock)
    first = runtime.start("approval", key="invoice-42")
    assert runtime.start("approval", key="invoice-42") == first
    assert runtime.start("approval", key="invoice-43") != first
    assert len(runtime.list(name="approval")) == 2
    with pytest.raises(UnknownWorkflowError, match="no workflow named 'aproval'"):
        runtime.start("aproval")


def test_durable_timer_fires_when_due_even_after_a_restart(
    store_factory: StoreFactory, clock: SimulatedClock
) -> None:
    runtime = Runtime(store_factory(), [approval], clock=clock)
    run_id = runtime.start("approval")
    assert runtime.get(run_id).wake_at == clock.now() + DAY
    worker = Worker(runtime)
    assert worker.run_until_idle() == 0
    clock.advance(DAY - 1)
    assert worker.run_until_idle() == 0
    # a new process: new store connection, new runtime, new worker
    clock.advance(1)
    restarted = Runtime(store_factory(), [approval], clock=clock)
    assert Worker(restarted).run_until_idle() == 1
    run = restarted.get(run_id)
    assert (run.status, run.state, run.wake_at) == ("done", "expired", None)


def test_sent_events_are_applied_in_order_and_ended_runs_refuse_events(
    store: Store, clock: SimulatedClock
) -> None:
    # queued for a worker (a send to a run at rest applies it: test_send_step.py)
    runtime = Runtime(store, [approval], clock=clock, step_in_send=False)
    run_id = runtime.start("approval")
    runtime.send(run_id, {"type": "APPROVE", "by": "ann"})
    runtime.send(run_id, "REJECT")  # comes after the event that ends the run: a dead letter
    assert Worker(runtime).run_until_idle() == 1
    run = runtime.get(run_id)
    assert (run.status, run.state, run.snapshot["context"]) == (
        "done",
        "approved",
        {"approved_by": "ann"},
    )
    assert [(e.event["type"], e.state_after) for e in store.list_events(run_id)] == [
        ("APPROVE", "approved"),
    ]
    assert [(d.event["type"], d.reason) for d in runtime.dead_letters(run_id)] == [
        ("REJECT", "the run ended (done) before this event was applied"),
    ]
    assert store.pending_events(run_id) == []
    with pytest.raises(RunFinishedError):
        runtime.send(run_id, "APPROVE")


def test_cancel_idle_run_and_cancel_of_a_run_a_worker_holds(
    store: Store, clock: SimulatedClock, ledger: sqlite3.Connection
) -> None:
    # an entry action is an effect of the run's step: a worker holds the run while it runs
    noting = create_machine(
        {
            "id": "noting",
            "initial": "noted",
            "states": {
                "noted": {"entry": "notify", "on": {"DONE": "over"}},
                "over": {"type": "final"},
            },
        },
        actions={"notify": workflows.notify},
    )
    runtime = Runtime(store, [approval, order, noting], clock=clock)
    idle = runtime.start("approval")
    assert runtime.cancel(idle, "not needed") == "cancelled"
    assert (runtime.get(idle).status, runtime.get(idle).last_error) == ("cancelled", "not needed")
    assert runtime.cancel(idle) == "finished"

    # a run whose call an executor is running is not held: the cancel ends it at once and
    # stops the call (its late result is dropped)
    calling = runtime.start("order")
    assert [c.call_id for c in store.claim_calls("someone", clock.now(), 10_000, 10)] == ["charge"]
    assert store.claim_runs("someone", clock.now(), 10_000, 10) == []
    assert runtime.cancel(calling, "changed my mind") == "cancelled"
    assert [c.status for c in store.list_calls(calling)] == ["stopped"]
    assert runtime.get(calling).status == "cancelled"

    busy = runtime.start("noting")
    claimed = store.claim_runs("someone", clock.now(), 10_000, 10)
    assert [r.id for r in claimed] == [busy]
    assert runtime.cancel(busy, "customer left") == "requested"
    store.release(busy, "someone", clock.now())  # the holder lets go without stepping
    assert Worker(runtime).run_until_idle() >= 1
    run = runtime.get(busy)
    assert (run.status, run.last_error) == ("cancelled", "customer left")
    assert run.snapshot["status"] == "stopped"


def test_unrestorable_snapshot_fails_that_run_only(store: Store, clock: SimulatedClock) -> None:
    runtime = Runtime(store, [approval], clock=clock)
    bad, good = runtime.start("approval"), runtime.start("approval")
    version = store.claim_runs("tamper", clock.now() + DAY, 1000, 1)[0].version
    broken = {**runtime.get(bad).snapshot, "value": "no_such_state"}
    store.commit_step(
        StepCommit(
            run_id=bad,
            owner="tamper",
            expected_version=version,
            state="?",
            snapshot=broken,
            status="active",
            wake_at=clock.now(),
        ),
        clock.now(),
    )
    runtime.send(good, "APPROVE")
    Worker(runtime).run_until_idle()
    failed = runtime.get(bad)
    assert failed.status == "error" and failed.failed_at is not None
    assert "snapshot does not restore" in (failed.last_error or "")
    assert "no_such_state" in (failed.last_error or "")
    assert failed.snapshot == broken  # kept for inspection
    assert runtime.get(good).status == "done"


def test_a_raising_action_fails_the_run_with_the_reason(
    store: Store, clock: SimulatedClock
) -> None:
    def explode(context: Any, event: Any) -> None:
        raise RuntimeError("mail server down")

    machine = create_machine(
        {"id": "mailer", "initial": "a", "states": {"a": {"entry": "send_mail"}}},
        actions={"send_mail": explode},
    )
    runtime = Runtime(store, [machine], clock=clock)
    run_id = runtime.start("mailer")
    Worker(runtime).run_until_idle()
    run = runtime.get(run_id)
    assert run.status == "error"
    assert run.last_error == "action 'send_mail' raised RuntimeError: mail server down"
    assert [(e.status, e.error) for e in store.list_effects(run_id)] == [("failed", run.last_error)]
    trace = store.error_traceback(run_id) or ""  # where it raised, kept with the error
    assert ", in explode\n" in trace and trace.endswith("RuntimeError: mail server down\n")
    inline = Inline(runtime).run("mailer")
    assert inline.status == "error"
    assert ", in explode\n" in (store.error_traceback(inline.run_id) or "")  # (Inline's too)


def test_invoked_actor_errors_route_to_on_error_with_the_idempotency_key(
    store: Store, clock: SimulatedClock
) -> None:
    seen: list[tuple[Any, str | None]] = []

    def flaky(input: Any) -> Any:
        seen.append((input, current_idempotency_key()))
        raise ConnectionError("timeout talking to bank")

    machine = create_machine(
        {
            "id": "payer",
            "initial": "paying",
            "states": {
                "paying": {
                    "invoke": {
                        "id": "pay",
                        "src": "pay",
                        "input": 12,
                        "onError": {"target": "failed"},
                    }
                },
                "failed": {"type": "final"},
            },
        },
        actors={"pay": flaky},
    )
    runtime = Runtime(store, [machine], clock=clock)
    run_id = runtime.start("payer")
    Worker(runtime).run_until_idle()
    assert runtime.get(run_id).state == "failed"
    assert seen == [(12, call_key(f"{run_id}:1:0"))]
    event = store.list_events(run_id)[0].event
    assert event["type"] == "xstate.error.actor.pay"
    assert event["error"]["name"] == "ConnectionError"
    assert event["error"]["message"] == "timeout talking to bank"
    assert "OSError" in event["error"]["types"]


def test_runs_are_pinned_to_their_definition_version(store: Store, clock: SimulatedClock) -> None:
    old_runtime = Runtime(store, [approval], clock=clock)
    old_run = old_runtime.start("approval")
    changed = dict(approval.config)
    changed["states"] = {**approval.config["states"], "approved": {"type": "final", "tags": ["ok"]}}
    v2 = create_machine(changed)
    assert v2.fingerprint != approval.fingerprint
    new_runtime = Runtime(store, [v2], clock=clock)
    new_runtime.send(old_run, "APPROVE")
    assert Worker(new_runtime).run_until_idle() == 0  # not its version: left alone
    assert [(u.workflow_version, u.runs) for u in new_runtime.unknown_versions()] == [
        (approval.fingerprint, 1)
    ]
    assert Worker(old_runtime).run_until_idle() == 1  # a worker with the old definition can
    assert old_runtime.get(old_run).state == "approved"


def test_a_definition_with_a_migration_takes_over_old_runs(
    store: Store, clock: SimulatedClock
) -> None:
    config_v1 = {**approval.config, "version": "1"}
    v1 = create_machine(config_v1)
    runtime_v1 = Runtime(store, [v1], clock=clock)
    run_id = runtime_v1.start("approval")
    config_v2 = {**config_v1, "version": "2", "context": {"approved_by": None, "channel": None}}

    def from_v1(data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "context": {**data["context"], "channel": "email"}}

    v2 = create_machine(config_v2, migrations={"1": from_v1})
    runtime_v2 = Runtime(store, [v2], clock=clock)
    assert runtime_v2.unknown_versions() == []
    runtime_v2.send(run_id, {"type": "APPROVE", "by": "bob"})  # applied in the send, migrated
    assert Worker(runtime_v2).run_until_idle() == 0
    run = runtime_v2.get(run_id)
    assert run.workflow_version == v2.fingerprint
    assert run.snapshot["context"] == {"approved_by": "bob", "channel": "email"}
    assert run.snapshot["version"] == "2"


def test_stuck_runs_are_reported(store: Store, clock: SimulatedClock) -> None:
    runtime = Runtime(store, [approval], clock=clock)
    run_id = runtime.start("approval")
    clock.advance(2 * 3_600_000)  # untouched, but asleep until its one-day expiry: waiting
    assert runtime.stuck(3_600_000) == []
    clock.advance(DAY)  # the expiry is overdue by an hour and no worker stepped the run
    assert [r.id for r in runtime.stuck(3_600_000)] == [run_id]
    assert runtime.stuck(2 * DAY) == []


def test_worker_thread_serves_until_stopped_and_releases_its_leases(
    store: Store, ledger: sqlite3.Connection
) -> None:
    runtime = Runtime(store, [order, approval])
    ids = [runtime.start("order", {"amount": n}) for n in range(6)]
    waiting = runtime.start("approval")
    worker = Worker(runtime, concurrency=3, lease_ms=2000, poll_ms=20)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        from tests.persistence.conftest import wait_for

        wait_for(lambda: all(runtime.get(i).status == "done" for i in ids))
        runtime.send(waiting, "APPROVE")
        wait_for(lambda: runtime.get(waiting).status == "done")
    finally:
        worker.stop()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert all(r.lease_owner is None for r in runtime.list())
    assert ledger.execute("SELECT count(*) FROM charges").fetchone() == (6,)


def test_stale_driver_cannot_overwrite_a_run_taken_over(
    store: Store, clock: SimulatedClock
) -> None:
    runtime = Runtime(store, [approval], clock=clock, step_in_send=False)  # queued, claimed
    run_id = runtime.start("approval")
    runtime.send(run_id, "APPROVE")
    stale = store.claim_runs("stale-worker", clock.now(), 1000, 1)[0]
    clock.advance(1001)  # its lease expired without a heartbeat
    assert Worker(runtime).run_until_idle() == 1
    with pytest.raises(ConflictError):
        store.commit_step(
            StepCommit(
                run_id=run_id,
                owner="stale-worker",
                expected_version=stale.version,
                state="rejected",
                snapshot={},
                status="done",
            ),
            clock.now(),
        )
    assert runtime.get(run_id).state == "approved"


def test_workflows_module_exposes_machines() -> None:
    from persistence.runtime import machines_from

    assert {m.id for m in machines_from(vars(workflows).values())} == {
        "order",
        "approval",
        "retrying",
        "payments",
        "fulfilment",
    }


def test_inline_actions_run_from_their_outbox_record_with_the_key(
    store: Store, clock: SimulatedClock
) -> None:
    calls: list[tuple[Any, str]] = []

    def greet(context: Any, event: Any, idempotency_key: str) -> None:
        calls.append((dict(context), idempotency_key))

    machine = create_machine(
        {
            "id": "greeter",
            "initial": "a",
            "context": {"who": "ann"},
            "states": {"a": {"entry": [greet], "on": {"GO": "b"}}, "b": {"type": "final"}},
        },
    )
    runtime = Runtime(store, [machine], clock=clock)
    run_id = runtime.start("greeter")
    Worker(runtime).run_until_idle()
    assert calls == [({"who": "ann"}, call_key(f"{run_id}:1:0"))]
    assert [e.status for e in store.list_effects(run_id)] == ["done"]


@pytest.mark.parametrize("site", ["action", "beside"])
def test_heartbeats_keep_a_long_effect_leased_past_the_lease_time(store: Store, site: str) -> None:
    import time

    # The heartbeat renews every lease/3. On a loaded 2-core machine a heartbeat was seen
    # landing 350 ms after the previous one, so a 300 ms lease expired under a live worker;
    # 1.2 s leaves 800 ms for the heartbeat thread to be late.
    lease_ms = 1200
    returned = threading.Event()

    def slow(input: Any) -> str:
        time.sleep(2.5 * lease_ms / 1000)  # two and a half lease periods
        returned.set()
        return "ok"

    machine = create_machine(
        {
            "id": "slow",
            "initial": "a",
            "states": {
                "a": {"invoke": {"id": "s", "src": "slow", "onDone": "b"}},
                "b": {"type": "final"},
            },
        },
        actors={"slow": slow},
    )
    # an action runs in its run's step: the worker's heartbeat renews the run's lease;
    # a call beside its run: the executor renews the call's lease (the run is not held)
    limited = site == "action"
    if limited:
        machine = create_machine(
            {
                "id": "slow",
                "initial": "a",
                "states": {"a": {"entry": "slow", "always": "b"}, "b": {"type": "final"}},
            },
            actions={"slow": lambda context, event: slow(None)},
        )
    runtime = Runtime(store, [machine])
    run_id = runtime.start("slow")
    worker = Worker(runtime, lease_ms=lease_ms, poll_ms=10)
    thread = threading.Thread(target=worker.run)
    thread.start()
    stolen: list[str] = []
    try:
        from tests.persistence.conftest import wait_for

        if limited:
            wait_for(lambda: runtime.get(run_id).lease_owner is not None)
        else:
            wait_for(lambda: store.list_calls(run_id)[0].status == "running")
        deadline = time.monotonic() + 60
        # a rival keeps trying to take the run (the call) for as long as the effect runs
        while not returned.is_set() and time.monotonic() < deadline:
            now = runtime.clock.now()
            stolen += [r.id for r in store.claim_runs("rival", now, lease_ms, 5)]
            stolen += [c.run_id for c in store.claim_calls("rival", now, lease_ms, 5)]
            time.sleep(0.05)
        wait_for(lambda: runtime.get(run_id).status == "done")
        if limited:  # (its run ended in the step that recorded the action: then it ran)
            wait_for(lambda: [e.status for e in store.list_effects(run_id)] == ["done"])
    finally:
        worker.stop()
        thread.join(timeout=30)
    assert returned.is_set() and stolen == []
    if not limited:
        assert [(c.status, c.attempt) for c in store.list_calls(run_id)] == [("done", 1)]
        assert [a.outcome for a in store.call_attempts(run_id)] == ["done"]  # never taken over


def test_a_retried_call_waits_durably_and_keeps_its_key_across_attempts_and_restarts(
    store_factory: StoreFactory, clock: SimulatedClock
) -> None:
    keys: list[str] = []

    def pay(amount: int, idempotency_key: str) -> str:
        keys.append(idempotency_key)
        if len(keys) < 3:
            raise ConnectionError(f"bank timeout #{len(keys)}")
        return "paid"

    config = {
        "id": "payment",
        "initial": "paying",
        "states": {
            "paying": {
                "invoke": {
                    "id": "pay",
                    "src": "pay",
                    "input": 5,
                    "onDone": "paid",
                    "retry": {"max_attempts": 5, "initial_interval": 60_000, "backoff": "fixed"},
                }
            },
            "paid": {"type": "final"},
        },
    }
    machine = create_machine(config, actors={"pay": pay})
    runtime = Runtime(store_factory(), [machine], clock=clock)
    run_id = runtime.start("payment")
    Worker(runtime).run_until_idle()
    waiting = runtime.get(run_id)
    assert waiting.state == "paying.waiting_to_retry"
    assert (waiting.attempt_count, waiting.last_error) == (1, "ConnectionError: bank timeout #1")
    assert waiting.wake_at == clock.now() + 60_000
    clock.advance(59_999)
    assert Worker(runtime).run_until_idle() == 0  # not due yet
    clock.advance(1)
    restarted = Runtime(store_factory(), [machine], clock=clock)  # as after a crash
    Worker(restarted).run_until_idle()
    assert restarted.get(run_id).attempt_count == 2
    clock.advance(60_000)
    Worker(restarted).run_until_idle()
    done = restarted.get(run_id)
    assert (done.status, done.state, done.attempt_count) == ("done", "paid", 3)
    assert len(keys) == 3 and len(set(keys)) == 1
    retry_key = waiting.snapshot["retries"]["payment.paying"]["key"]
    assert keys[0] == call_key(f"{run_id}:1:0", retry_key)  # the run's id and the call's record


@pytest.mark.parametrize(
    "retry",
    [{"retry": {"max_attempts": 1}}, {}],
    ids=["with-retry", "onFinalFailure_skip_without_retry"],
)
def test_a_skipped_call_ends_the_run_done_partial(
    store: Store, clock: SimulatedClock, retry: dict[str, Any]
) -> None:
    def enrich(item: Any) -> Any:
        raise ValueError("no such company")

    machine = create_machine(
        {
            "id": "crm",
            "initial": "enriching",
            "states": {
                "enriching": {
                    "invoke": {
                        "id": "enrich",
                        "src": "enrich",
                        "onDone": "done",
                        **retry,
                        "onFinalFailure": "skip",
                    }
                },
                "done": {"type": "final"},
            },
        },
        actors={"enrich": enrich},
    )
    runtime = Runtime(store, [machine], clock=clock)
    run_id = runtime.start("crm")
    Worker(runtime).run_until_idle()
    run = runtime.get(run_id)
    assert run.status == "done_partial", (run.status, run.snapshot)
    assert [(s["invoke"], s["attempts"]) for s in run.snapshot["skipped"]] == [("enrich", 1)]
    assert run.completed_at is not None


def test_engine_actor_logic_kinds_in_a_worker(store: Store, clock: SimulatedClock) -> None:
    from statecharts import from_async, from_callable, from_callback

    async def fetch(input: Any) -> Any:
        return {"fetched": input}

    def stream(send_back: Any, receive: Any, input: Any) -> None:
        return None

    machine = create_machine(
        {
            "id": "kinds",
            "initial": "one",
            "context": {},
            "states": {
                "one": {
                    "invoke": {
                        "id": "c",
                        "src": "double",
                        "input": 21,
                        "onDone": {"target": "two", "actions": "keep"},
                    }
                },
                "two": {
                    "invoke": {
                        "id": "a",
                        "src": "fetch",
                        "input": "x",
                        "onDone": {"target": "three", "actions": "keep"},
                    }
                },
                "three": {
                    "invoke": {
                        "id": "cb",
                        "src": "stream",
                        "onError": {"target": "four", "actions": "keep_error"},
                    }
                },
                "four": {"type": "final"},
            },
        },
        actors={
            "double": from_callable(lambda n: n * 2, name="double"),
            "fetch": from_async(fetch),
            "stream": from_callback(stream),
        },
        actions={
            "keep": assign(lambda c, e: {**c, e["type"]: e["output"]}),
            "keep_error": assign(lambda c, e: {**c, "error": e["error"]["message"]}),
        },
    )
    runtime = Runtime(store, [machine], clock=clock)
    run_id = runtime.start("kinds")
    Worker(runtime).run_until_idle()
    run = runtime.get(run_id)
    assert run.state == "four"
    context = run.snapshot["context"]
    assert context["xstate.done.actor.c"] == 42
    assert context["xstate.done.actor.a"] == {"fetched": "x"}
    assert context["error"] == "actor 'stream' cannot run in a durable worker"


def test_worker_reports_stuck_runs_and_runs_it_cannot_step(
    store: Store, clock: SimulatedClock, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    waiting = Runtime(store, [approval], clock=clock).start("approval")
    runtime = Runtime(store, [order], clock=clock)  # no definition for approval here
    clock.advance(DAY + 2 * 3_600_000)  # its expiry timer overdue: nobody here can step it
    worker = Worker(runtime, poll_ms=10, stuck_after_ms=3_600_000, report_every_s=0.05)
    thread = threading.Thread(target=worker.run)
    with caplog.at_level(logging.WARNING, logger="statecharts.worker"):
        thread.start()
        try:
            from tests.persistence.conftest import wait_for

            wait_for(lambda: "no definition" in caplog.text)
        finally:
            worker.stop()
            thread.join(timeout=30)
    assert f"stuck run {waiting} (approval, state waiting)" in caplog.text
    assert f"1 active run(s) of approval version {approval.fingerprint}" in caplog.text


def test_a_failed_run_starts_its_error_workflow_exactly_once(
    store: Store, clock: SimulatedClock
) -> None:
    def charge(amount: Any) -> Any:
        raise PermissionError("card declined")

    failing = create_machine(
        {
            "id": "billing",
            "initial": "charging",
            "meta": {"error_workflow": "on_failure"},
            "states": {"charging": {"invoke": {"id": "charge", "src": "charge"}}},
        },
        actors={"charge": charge},
    )
    handler = create_machine(
        {
            "id": "on_failure",
            "initial": "alerting",
            "context": lambda input: {"failure": input},
            "meta": {"error_workflow": "on_failure"},  # would loop: must not trigger itself
            "states": {"alerting": {"entry": "page"}},
        },
        actions={"page": lambda c, e: (_ for _ in ()).throw(RuntimeError("pager down"))},
    )
    runtime = Runtime(store, [failing, handler], clock=clock)
    run_id = runtime.start("billing")
    Worker(runtime).run_until_idle()
    failed = runtime.get(run_id)
    assert (failed.status, failed.last_error) == ("error", "PermissionError: card declined")
    handlers = runtime.list(name="on_failure")
    assert len(handlers) == 1
    assert handlers[0].key == f"error-of:{run_id}"
    failure = handlers[0].snapshot["context"]["failure"]
    assert (failure["run_id"], failure["workflow"], failure["state"]) == (
        run_id,
        "billing",
        "charging",
    )
    assert failure["error"] == {"name": "PermissionError", "message": "card declined"}
    assert (failure["key"], failure["failed_at"], failure["dry_run"]) == (None, clock.now(), False)
    assert handlers[0].status == "error"  # the handler failed too, and started nothing more
    assert len(runtime.list()) == 2
    with pytest.raises(ValueError, match="not among the runtime's machines"):
        Runtime(store, [failing], clock=clock)


def test_a_round_commits_its_runs_together_and_drops_only_a_run_taken_over(
    store: Store, ledger: sqlite3.Connection, clock: SimulatedClock
) -> None:
    from persistence.driver import RunDriver

    # actions run in their run's step: the round's runs are held while they run
    runtime = Runtime(store, [paying], clock=clock)
    ids = [runtime.start("order", {"amount": n}) for n in (1, 2, 3)]
    claimed = store.claim_runs("slow", clock.now(), 1000, 3)
    assert {r.id for r in claimed} == set(ids)
    clock.advance(1001)  # the slow worker's leases expire; another worker takes one run over
    (taken,) = store.claim_runs("fast", clock.now(), 60_000, 1)
    slow = RunDriver(runtime, "slow", 1000)
    slow.drive(slow.claimed(claimed), lambda: False)
    for other in (i for i in ids if i != taken.id):  # stepped until their cooling timer
        assert (runtime.get(other).state, runtime.get(other).lease_owner) == ("cooling", None)
        assert [e.status for e in store.list_effects(other)] == ["done"]
    assert store.get_run(taken.id) == taken  # the slow driver's step for it wrote nothing
    assert [e.status for e in store.list_effects(taken.id)] == ["pending"]
    clock.advance(60_001)
    drain(Worker(runtime), clock)
    assert [runtime.get(i).state for i in ids] == ["shipped"] * 3
    charges = dict(ledger.execute("SELECT key, amount FROM charges").fetchall())
    assert charges == {call_key(f"{i}:1:0"): n for i, n in zip(ids, (1, 2, 3))}


def test_worker_batch_must_be_positive(store: Store) -> None:
    with pytest.raises(ValueError, match="batch must be at least 1"):
        Worker(Runtime(store, [order]), batch=0)


def test_an_action_that_is_an_unhashable_callable_still_gets_its_key(
    store: Store, clock: SimulatedClock
) -> None:
    class Recorder:  # defines __eq__ without __hash__: instances are unhashable
        def __init__(self) -> None:
            self.keys: list[str] = []

        def __eq__(self, other: object) -> bool:
            return self is other

        def __call__(self, context: Any, event: Any, idempotency_key: str) -> None:
            self.keys.append(idempotency_key)

    record = Recorder()
    machine = create_machine(
        {
            "id": "noted",
            "initial": "a",
            "states": {"a": {"entry": "note", "on": {"GO": "b"}}, "b": {"type": "final"}},
        },
        actions={"note": record},
    )
    runtime = Runtime(store, [machine], clock=clock)
    run_id = runtime.start("noted")
    drain(Worker(runtime), clock, rounds=2)
    assert record.keys == [call_key(f"{run_id}:1:0")]


@pytest.mark.parametrize("site", ["action", "beside"])
def test_a_round_runs_the_calls_of_its_runs_at_the_same_time(
    store: Store, clock: SimulatedClock, site: str
) -> None:
    together = threading.Barrier(4, timeout=10)  # passes only if four calls wait at once

    def rendezvous(n: int) -> int:
        together.wait()
        return n

    machine = create_machine(
        {
            "id": "meet",
            "initial": "calling",
            "states": {
                "calling": {
                    "invoke": {
                        "src": "rendezvous",
                        "input": lambda context, event: 1,
                        "onDone": "met",
                        "onError": "missed",
                    }
                },
                "met": {"type": "final"},
                "missed": {"type": "final"},
            },
        },
        actors={"rendezvous": rendezvous},
    )
    if site == "action":  # run in their runs' steps: a round of four runs makes them at once
        in_step = create_machine(
            {
                "id": "meet",
                "initial": "calling",
                "states": {
                    "calling": {"entry": "rendezvous", "always": "met"},
                    "met": {"type": "final"},
                },
            },
            actions={"rendezvous": lambda context, event: rendezvous(1)},
        )
        runtime = Runtime(store, [in_step], clock=clock)
        ids = [runtime.start("meet") for _ in range(4)]
        Worker(runtime, batch=4).run_until_idle()
    else:  # beside their runs: a worker's executor runs them at once on its threads
        from tests.persistence.conftest import wait_for

        runtime = Runtime(store, [machine], clock=clock)
        ids = [runtime.start("meet") for _ in range(4)]
        worker = Worker(runtime, poll_ms=10)
        thread = threading.Thread(target=worker.run)
        thread.start()
        try:
            wait_for(lambda: all(runtime.get(i).status == "done" for i in ids))
        finally:
            worker.stop()
            thread.join(timeout=30)
    assert [runtime.get(i).state for i in ids] == ["met"] * 4


def test_the_operator_line_for_a_lease_takeover(
    store: Store,
    ledger: sqlite3.Connection,
    clock: SimulatedClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from persistence.driver import RunDriver

    # a run is held (and taken over) while its step's effects run (an action's)
    runtime = Runtime(store, [paying], clock=clock)
    run_id = runtime.start("order", {"amount": 3}, key="order-7")
    store.claim_runs("crashed", clock.now(), 1000, 1)  # a worker that then died
    clock.advance(1001)
    (claimed,) = store.claim_runs("rescuer", clock.now(), 60_000, 1)
    assert (claimed.previous_owner, claimed.claim_count) == ("crashed", 2)
    with caplog.at_level("INFO", logger="statecharts.runs"):
        rescuer = RunDriver(runtime, "rescuer", 60_000)
        rescuer.drive(rescuer.claimed([claimed]), lambda: False)
    lines = [r for r in caplog.records if run_id in r.getMessage()]
    takeover = [r for r in lines if "taken over" in r.getMessage()]
    assert len(takeover) == 1 and takeover[0].levelname == "WARNING"
    assert "lease of crashed expired; taken over by rescuer" in takeover[0].getMessage()
    assert "order" in takeover[0].getMessage() and "key order-7" in takeover[0].getMessage()
    # (the line of a scheduled retry, now always a call's beside its run: the next test)


def test_the_operator_line_for_a_scheduled_retry_of_a_call_beside_its_run(
    store: Store,
    ledger: sqlite3.Connection,
    clock: SimulatedClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    runtime = Runtime(store, [workflows.retrying], clock=clock)
    run_id = runtime.start("retrying", key="order-8")
    with caplog.at_level("INFO", logger="statecharts.runs"):
        assert Worker(runtime).run_one_call()  # its end is written with the step it causes
    retry = [
        r
        for r in caplog.records
        if run_id in r.getMessage() and "retry scheduled" in r.getMessage()
    ]
    assert len(retry) == 1 and retry[0].levelname == "INFO"
    assert "attempt 1 failed (Unavailable: payments API unavailable)" in retry[0].getMessage()
    assert "state charging.waiting_to_retry" in retry[0].getMessage()
    assert "key order-8" in retry[0].getMessage()


def test_durable_idempotency_keys_are_provider_safe_per_run_and_per_call_site(
    store: Store, clock: SimulatedClock
) -> None:
    """Issue 44: a durable call gets the same key form as an in-memory one (32 characters of
    [A-Za-z0-9_-] unless the call site's keyLength says otherwise), unique per run on a shared
    clock, and the same for every attempt of a retried call."""
    seen: list[tuple[str, str]] = []

    def charge(amount: int, idempotency_key: str) -> str:
        if ("charge", idempotency_key) not in seen:
            seen.append(("charge", idempotency_key))
            raise ConnectionError("timeout")  # each call's first attempt fails
        seen.append(("charge", idempotency_key))
        return "ch_1"

    def mail(context: Any, event: Any, idempotency_key: str) -> None:
        seen.append(("mail", idempotency_key))

    machine = create_machine(
        {
            "id": "order",
            "initial": "charging",
            "states": {
                "charging": {
                    "invoke": {
                        "id": "charge",
                        "src": "charge",
                        "input": 5,
                        "onDone": "paid",
                        "keyLength": 40,
                        "retry": {"max_attempts": 2, "initial_interval": 0},
                    }
                },
                "paid": {"type": "final", "entry": "mail"},
            },
        },
        actors={"charge": charge},
        actions={"mail": mail},
    )
    runtime = Runtime(store, [machine], clock=clock)
    runs = [runtime.start("order"), runtime.start("order")]  # the same millisecond
    Worker(runtime).run_until_idle()
    assert [runtime.get(r).status for r in runs] == ["done", "done"]
    charges = [key for name, key in seen if name == "charge"]
    mails = [key for name, key in seen if name == "mail"]
    assert len(charges) == 4 and len(set(charges)) == 2  # two runs, two attempts each
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{40}", k) for k in charges)
    assert len(set(mails)) == 2 and all(re.fullmatch(r"[A-Za-z0-9_-]{32}", k) for k in mails)
