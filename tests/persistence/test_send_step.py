"""`Runtime.send` applies an event to a run at rest in the send's own transaction
(`Store.send_and_step`, `RunDriver.send`), and queues it exactly as before otherwise: on every
store (SQLite file, PostgreSQL, memory), with the records, order, fencing, cascades and
telemetry of a worker's step."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

from persistence.inline import Inline
from persistence.runtime import Runtime
from persistence.stores import ConflictError, NewEffect, StepCommit, Store, StoreEncodingError
from persistence.stores.errors import RunFinishedError, RunNotFoundError
from persistence.telemetry import Telemetry
from persistence.telemetry.metrics import STEPS, Metric
from persistence.worker import Worker
from statecharts import SimulatedClock, assign, create_machine
from tests.persistence.conftest import wait_for
from tests.persistence.workflows import approval

T0 = 1_700_000_000_000


class Counted:
    """A metrics sink that keeps every counter increment."""

    def __init__(self) -> None:
        self.added: list[tuple[str, tuple[str, ...], float]] = []

    def add(self, metric: Metric, amount: float, labels: tuple[str, ...]) -> None:
        self.added.append((metric.name, labels, amount))

    def record(self, metric: Metric, value: float, labels: tuple[str, ...]) -> None:
        del metric, value, labels

    def total(self, name: str) -> float:
        return sum(amount for metric, _, amount in self.added if metric == name)


CALLS: list[Any] = []


def _record(context: Any, event: Any) -> None:
    CALLS.append(event.get("n"))


def _guard_raises(context: Any, event: Any) -> bool:
    raise RuntimeError("guard exploded")


counter = create_machine(
    {
        "id": "counter",
        "initial": "counting",
        "context": {"n": 0},
        "states": {
            "counting": {
                "on": {
                    "INC": {"actions": "inc"},
                    "CALL": {"actions": "record"},
                    "CHECK": {"guard": "explodes", "target": "done"},
                    "FINISH": "done",
                }
            },
            "done": {"type": "final"},
        },
    },
    actions={"inc": assign({"n": lambda context, event: context["n"] + 1}), "record": _record},
    guards={"explodes": _guard_raises},
)

kid = create_machine(
    {
        "id": "kid",
        "initial": "waiting",
        "states": {"waiting": {"on": {"FINISH": "finished"}}, "finished": {"type": "final"}},
    }
)

parent = create_machine(
    {
        "id": "parent",
        "initial": "idle",
        "states": {
            "idle": {"on": {"GO": "working"}},
            "working": {
                "invoke": {"id": "kid", "src": "kid", "onDone": "finished"},
                "on": {"STOP": "stopped"},
            },
            "finished": {"type": "final"},
            "stopped": {"type": "final"},
        },
    },
    actors={"kid": kid},
)


@pytest.fixture
def clock() -> SimulatedClock:
    return SimulatedClock(start=T0)


def _journal(store: Store, run_id: str) -> list[tuple[str, str, str]]:
    return [
        (str(e.event["type"]), e.state_before, e.state_after) for e in store.list_events(run_id)
    ]


def test_an_event_sent_to_a_run_at_rest_is_applied_in_the_send(
    store: Store, clock: SimulatedClock
) -> None:
    metrics = Counted()
    runtime = Runtime(
        store, [counter], clock=clock, telemetry=Telemetry(tracing=False, metrics=[metrics])
    )
    run_id = runtime.start("counter")
    inbox_id = runtime.send(run_id, "INC")
    run = runtime.get(run_id)  # no worker anywhere: the send committed the step
    assert (
        run.snapshot["context"],
        run.version,
        run.lease_owner,
        run.claim_count,
        run.wake_at,
    ) == ({"n": 1}, 2, None, 0, None)
    assert isinstance(inbox_id, int) and inbox_id > 0
    assert store.pending_events(run_id) == [] and store.dead_letters(run_id) == []
    assert _journal(store, run_id) == [("INC", "counting", "counting")]
    assert metrics.total(STEPS.name) == 1  # counted once, as a worker's step
    runtime.send(run_id, "FINISH")
    assert runtime.get(run_id).status == "done"
    assert metrics.total(STEPS.name) == 2
    assert ("statecharts_runs_finished", ("counter", "done"), 1) in metrics.added
    assert Worker(runtime).run_until_idle() == 0  # nothing left for a worker
    with pytest.raises(RunFinishedError):
        runtime.send(run_id, "INC")
    with pytest.raises(RunNotFoundError):
        runtime.send("00000000-0000-4000-8000-000000000000", "INC")
    assert _journal(store, run_id) == [
        ("INC", "counting", "counting"),
        ("FINISH", "counting", "done"),
    ]


def test_the_sends_step_is_traced_as_a_workers_step_linked_to_the_send(
    clock: SimulatedClock,
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from persistence.stores.memory import MemoryStore

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    store = MemoryStore()
    store.migrate()
    runtime = Runtime(store, [counter], clock=clock, telemetry=Telemetry(tracer_provider=provider))
    run_id = runtime.start("counter")
    runtime.send(run_id, "INC")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    start, send, step = spans["start counter"], spans["send INC"], spans["step counter"]
    assert step.parent is not None and step.parent.span_id == start.context.span_id
    assert [(link.context.trace_id, link.context.span_id) for link in step.links] == [
        (send.context.trace_id, send.context.span_id)
    ]
    assert (
        step.attributes["statecharts.step.committed"],
        step.attributes["statecharts.events"],
        step.attributes["statecharts.run.version"],
    ) == (True, ("INC",), 2)


def test_step_in_send_false_queues_every_event(store: Store, clock: SimulatedClock) -> None:
    runtime = Runtime(store, [counter], clock=clock, step_in_send=False)
    run_id = runtime.start("counter")
    runtime.send(run_id, "INC")
    assert runtime.get(run_id).snapshot["context"] == {"n": 0}
    assert [e.event for e in store.pending_events(run_id)] == [{"type": "INC"}]
    assert Worker(runtime).run_until_idle() == 1
    assert runtime.get(run_id).snapshot["context"] == {"n": 1}


def test_an_event_queued_before_keeps_its_place(store: Store, clock: SimulatedClock) -> None:
    queueing = Runtime(store, [approval], clock=clock, step_in_send=False)
    runtime = Runtime(store, [approval], clock=clock)
    run_id = runtime.start("approval")
    queueing.send(run_id, {"type": "APPROVE", "by": "ann"})
    runtime.send(run_id, "REJECT")  # an earlier event waits: this one is queued behind it
    assert runtime.get(run_id).state == "waiting"
    assert [e.event["type"] for e in store.pending_events(run_id)] == ["APPROVE", "REJECT"]
    assert Worker(runtime).run_until_idle() == 1
    run = runtime.get(run_id)
    assert (run.status, run.state, run.snapshot["context"]) == (
        "done",
        "approved",
        {"approved_by": "ann"},
    )
    assert [(d.event["type"], d.reason) for d in runtime.dead_letters(run_id)] == [
        ("REJECT", "the run ended (done) before this event was applied")
    ]


def test_a_run_a_worker_holds_gets_the_event_queued(store: Store, clock: SimulatedClock) -> None:
    runtime = Runtime(store, [counter], clock=clock)
    run_id = runtime.start("counter")
    queueing = Runtime(store, [counter], clock=clock, step_in_send=False)
    queueing.send(run_id, "INC")
    ((claimed, work),) = store.claim_work("w/1", clock.now(), 30_000, 10)
    assert claimed.id == run_id and len(work.inbox) == 1
    runtime.send(run_id, "INC")  # leased: queued, never written past the lease
    run = runtime.get(run_id)
    assert (run.version, run.lease_owner, run.snapshot["context"]) == (1, "w/1", {"n": 0})
    assert [e.event["type"] for e in store.pending_events(run_id)] == ["INC", "INC"]
    assert store.release(run_id, "w/1", None)
    assert Worker(runtime).run_until_idle() == 1
    assert runtime.get(run_id).snapshot["context"] == {"n": 2}
    # an expired lease is a takeover, a claim's: still queued
    queueing.send(run_id, "INC")
    store.claim_work("w/2", clock.now(), 1_000, 10)
    clock.advance(5_000)
    runtime.send(run_id, "INC")
    assert runtime.get(run_id).lease_owner == "w/2"
    assert Worker(runtime).run_until_idle() == 1
    assert runtime.get(run_id).snapshot["context"] == {"n": 4}


def test_pending_effects_keep_the_event_queued_and_effects_a_step_records_go_to_a_worker(
    store: Store, clock: SimulatedClock
) -> None:
    CALLS.clear()
    runtime = Runtime(store, [counter], clock=clock)
    run_id = runtime.start("counter")
    runtime.send(run_id, {"type": "CALL", "n": 1})  # folded; its action is left to a worker
    run = runtime.get(run_id)
    assert (run.version, run.lease_owner, run.wake_at) == (2, None, clock.now())
    assert [(e.step, e.status) for e in store.list_effects(run_id)] == [(2, "pending")]
    assert CALLS == []  # the send executes nothing
    runtime.send(run_id, "INC")  # effects wait to run: queued behind them
    assert runtime.get(run_id).version == 2
    assert [e.event["type"] for e in store.pending_events(run_id)] == ["INC"]
    assert Worker(runtime).run_until_idle() == 1  # claimed once: the action, then INC
    run = runtime.get(run_id)
    assert (run.snapshot["context"], run.claim_count, CALLS) == ({"n": 1}, 1, [1])
    assert [e.status for e in store.list_effects(run_id)] == ["done"]


def test_a_step_that_would_fail_the_run_is_left_to_a_worker(
    store: Store, clock: SimulatedClock
) -> None:
    runtime = Runtime(store, [counter], clock=clock)
    run_id = runtime.start("counter")
    runtime.send(run_id, "CHECK")  # its guard raises: queued, the run untouched
    run = runtime.get(run_id)
    assert (run.status, run.version) == ("active", 1)
    assert [e.event["type"] for e in store.pending_events(run_id)] == ["CHECK"]
    Worker(runtime).run_until_idle()  # failed as any queued event's raising guard fails it
    queued = Runtime(store, [counter], clock=clock, step_in_send=False)
    other = queued.start("counter")
    queued.send(other, "CHECK")
    Worker(queued).run_until_idle()
    failed, as_before = runtime.get(run_id), runtime.get(other)
    assert failed.status == as_before.status == "error"
    assert failed.last_error == as_before.last_error
    assert "guard exploded" in (failed.last_error or "")
    assert _journal(store, run_id) == _journal(store, other)


def test_a_run_that_does_not_restore_gets_the_event_queued_and_a_worker_fails_it(
    store: Store, clock: SimulatedClock
) -> None:
    runtime = Runtime(store, [counter], clock=clock)
    run_id = runtime.start("counter")
    broken = {**runtime.get(run_id).snapshot, "value": "nowhere"}
    with store._write() as conn:  # type: ignore[attr-defined]  # a bad deploy or a hand edit
        store._exec(
            conn,
            "UPDATE workflow_runs SET snapshot = ? WHERE id = ?",  # type: ignore[attr-defined]
            (store._j(broken), store._id(run_id)),
        )  # type: ignore[attr-defined]
    runtime.send(run_id, "INC")
    assert runtime.get(run_id).version == 1
    assert [e.event["type"] for e in store.pending_events(run_id)] == ["INC"]
    Worker(runtime).run_until_idle()
    run = runtime.get(run_id)
    assert (run.status, run.claim_count) == ("error", 1)
    assert "snapshot does not restore" in (run.last_error or "")
    assert [d.event["type"] for d in runtime.dead_letters(run_id)] == ["INC"]


def test_a_step_the_store_refuses_in_the_send_is_queued(
    store: Store,
    clock: SimulatedClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    runtime = Runtime(store, [counter], clock=clock)
    run_id = runtime.start("counter")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise StoreEncodingError("cannot store value: test")

    with monkeypatch.context() as patched:
        patched.setattr(store, "_commit_later_in", refuse)  # the step's write in the send
        if hasattr(store, "_step_from_rest"):  # and PostgreSQL's write of a step from rest
            patched.setattr(store, "_step_from_rest", refuse)
        with caplog.at_level(logging.WARNING, "statecharts.runs"):
            runtime.send(run_id, "INC")
    assert "refused in the send" in caplog.text
    assert runtime.get(run_id).version == 1  # nothing of the step, the event queued once
    assert [e.event["type"] for e in store.pending_events(run_id)] == ["INC"]
    assert Worker(runtime).run_until_idle() == 1
    assert runtime.get(run_id).snapshot["context"] == {"n": 1}


def test_a_stale_writer_loses_to_the_send_and_its_commit_writes_nothing(
    store: Store, clock: SimulatedClock
) -> None:
    runtime = Runtime(store, [counter], clock=clock)
    run_id = runtime.start("counter")
    ((stale, _),) = store.read_work([run_id])  # a worker's claim-free read, before the send
    runtime.send(run_id, "INC")
    late = StepCommit(
        run_id=run_id,
        owner="w/late",
        expected_version=stale.version,
        state="counting",
        snapshot=stale.snapshot,
        status="active",
        unleased=True,
    )
    with pytest.raises(ConflictError):
        store.commit_step(late, clock.now())
    leased = StepCommit(
        run_id=run_id,
        owner="w/late",
        expected_version=2,
        state="counting",
        snapshot=stale.snapshot,
        status="active",
    )  # no lease: fenced
    with pytest.raises(ConflictError):
        store.commit_step(leased, clock.now())
    assert runtime.get(run_id).snapshot["context"] == {"n": 1}


def test_concurrent_senders_apply_every_event_once(store_factory: Any, store_kind: str) -> None:
    if store_kind == "memory":
        pytest.skip("an in-memory database is one store object's own")
    stores = [store_factory() for _ in range(4)]
    runtimes = [Runtime(s, [counter]) for s in stores]
    run_id = runtimes[0].start("counter")
    worker = Worker(runtimes[0], concurrency=1, poll_ms=50)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        senders = [
            threading.Thread(target=lambda r=r: [r.send(run_id, "INC") for _ in range(25)])
            for r in runtimes
        ]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
        wait_for(lambda: runtimes[0].get(run_id).snapshot["context"]["n"] == 100)
    finally:
        worker.stop()
        thread.join()
    assert [e for e in stores[0].pending_events(run_id)] == []
    assert [t for t, _, _ in _journal(stores[0], run_id)] == ["INC"] * 100
    assert runtimes[0].get(run_id).version == 101
    for s in stores[1:]:
        s.close()


def test_a_send_that_starts_and_stops_a_child_run_cascades(
    store: Store, clock: SimulatedClock
) -> None:
    runtime = Runtime(store, [parent], clock=clock)
    run_id = runtime.start("parent")
    runtime.send(run_id, "GO")  # the step starts the child run, in the send's transaction
    (child,) = runtime.children(run_id)
    assert (runtime.get(run_id).state, child.status, child.parent_invoke_id) == (
        "working",
        "active",
        "kid",
    )
    runtime.send(child.id, "FINISH")  # the child ends: its parent is told, in that commit
    assert runtime.get(child.id).status == "done"
    assert [e.event["type"] for e in store.pending_events(run_id)] == ["xstate.done.actor.kid"]
    assert Worker(runtime).run_until_idle() == 1
    assert runtime.get(run_id).state == "finished"
    other = runtime.start("parent")
    runtime.send(other, "GO")
    (second,) = runtime.children(other)
    runtime.send(other, "STOP")  # leaving the invoking state stops the child run
    assert (runtime.get(other).status, runtime.get(second.id).status) == ("done", "cancelled")
    assert Worker(runtime).run_until_idle() == 0


def _from_rest(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Per send given a record of rest, whether PostgreSQL wrote its step from that record
    (one round trip); other stores never do (empty)."""
    seen: list[bool] = []
    original = getattr(store, "_step_from_rest", None)
    if original is not None:

        def spy(*args: Any) -> Any:
            written = original(*args)
            seen.append(written is not None)
            return written

        monkeypatch.setattr(store, "_step_from_rest", spy)
    return seen


def test_a_run_left_at_rest_here_is_stepped_from_its_row_and_a_stale_row_is_read_again(
    store: Store, store_kind: str, clock: SimulatedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = Runtime(store, [counter], clock=clock)
    elsewhere = Runtime(store, [counter], clock=clock)  # another process's runtime
    seen = _from_rest(store, monkeypatch)
    run_id = runtime.start("counter")
    rest = runtime.resting.get(run_id)
    assert rest is not None and rest.version == 1
    ids = [runtime.send(run_id, "INC"), runtime.send(run_id, "INC")]
    elsewhere.send(run_id, "INC")  # version 4: this runtime's record (3) is stale now
    ids.append(runtime.send(run_id, "INC"))  # read again under the lock, stepped at 4
    run = runtime.get(run_id)
    assert (run.snapshot["context"], run.version, run.lease_owner) == ({"n": 4}, 5, None)
    assert _journal(store, run_id) == [("INC", "counting", "counting")] * 4
    assert store.pending_events(run_id) == [] and store.dead_letters(run_id) == []
    assert ids == sorted(set(ids))  # inbox ids drawn as inserts draw them: distinct, rising
    rest = runtime.resting.get(run_id)
    assert rest is not None and (rest.version, rest.snapshot) == (5, run.snapshot)
    assert seen == ([True, True, False] if store_kind == "postgres" else [])
    runtime.send(run_id, "FINISH")
    assert runtime.get(run_id).status == "done" and runtime.resting.get(run_id) is None


def _lease_it(store: Store, run_id: str, clock: SimulatedClock) -> None:
    queueing = Runtime(store, [counter], clock=clock, step_in_send=False)
    queueing.send(run_id, "INC")
    ((claimed, _),) = store.claim_work("w/1", clock.now(), 30_000, 10)
    assert claimed.id == run_id


def _queue_one(store: Store, run_id: str, clock: SimulatedClock) -> None:
    Runtime(store, [counter], clock=clock, step_in_send=False).send(run_id, "INC")


def _edit_snapshot(store: Store, run_id: str, clock: SimulatedClock) -> None:
    edited = {**store.get_run(run_id).snapshot, "context": {"n": 40}}
    with store._write() as conn:  # type: ignore[attr-defined]  # an operator's hand edit
        store._exec(
            conn,
            "UPDATE workflow_runs SET snapshot = ? WHERE id = ?",  # type: ignore[attr-defined]
            (store._j(edited), store._id(run_id)),
        )  # type: ignore[attr-defined]


def _pending_effect(store: Store, run_id: str, clock: SimulatedClock) -> None:
    with store._write() as conn:  # type: ignore[attr-defined]  # an effect left pending
        store._insert_effects(
            conn,
            run_id,
            1,
            [
                NewEffect(
                    0,
                    "action",
                    {  # type: ignore[attr-defined]
                        "type": "record",
                        "event": {"type": "CALL", "n": 7},
                    },
                )
            ],
            clock.now(),
        )


@pytest.mark.parametrize(
    "change",
    [_lease_it, _queue_one, _edit_snapshot, _pending_effect],
    ids=["lease held", "event queued ahead", "snapshot edited", "effect pending"],
)
def test_a_run_no_longer_as_it_was_left_at_rest_is_never_written_from_that_record(
    store: Store,
    store_kind: str,
    clock: SimulatedClock,
    monkeypatch: pytest.MonkeyPatch,
    change: Callable[[Store, str, SimulatedClock], None],
) -> None:
    runtime = Runtime(store, [counter], clock=clock)
    run_id = runtime.start("counter")
    change(store, run_id, clock)  # behind the runtime's back, the version unchanged
    before = runtime.get(run_id)
    assert runtime.resting.get(run_id) is not None and before.version == 1
    seen = _from_rest(store, monkeypatch)
    runtime.send(run_id, "INC")
    after = runtime.get(run_id)
    assert seen == ([False] if store_kind == "postgres" else [])
    rest = runtime.resting.get(run_id)
    if change is _edit_snapshot:  # at rest as edited: stepped from the edit, not the record
        assert (after.version, after.snapshot["context"]) == (2, {"n": 41})
        assert rest is not None and rest.snapshot == after.snapshot
    else:  # not at rest: queued, the row as it was
        assert (after.version, after.snapshot, after.lease_owner) == (
            1,
            before.snapshot,
            before.lease_owner,
        )
        assert store.pending_events(run_id)[-1].event == {"type": "INC"}
        assert rest is None


def test_a_send_from_rest_waits_for_a_sender_holding_the_row_and_queues_behind_its_event(
    store: Store, store_kind: str, clock: SimulatedClock
) -> None:
    if store_kind == "memory":
        pytest.skip("an in-memory database is one store object's own")
    runtime = Runtime(store, [counter], clock=clock)
    run_id = runtime.start("counter")
    sent: list[int] = []
    # another sender holds the row (locked, not updated) and queues FINISH in its transaction
    with store._write() as conn:  # type: ignore[attr-defined]
        store._exec(
            conn,
            "SELECT id FROM workflow_runs WHERE id = ?"  # type: ignore[attr-defined]
            + store._LOCK_ROW,
            (store._id(run_id),),
        )  # type: ignore[attr-defined]
        store._exec(
            conn,
            "INSERT INTO workflow_inbox (run_id, event, created_at) "  # type: ignore[attr-defined]
            "VALUES (?, ?, ?)",
            (
                store._id(run_id),
                store._j({"type": "FINISH"}),  # type: ignore[attr-defined]
                store._t(clock.now()),
            ),
        )  # type: ignore[attr-defined]
        sender = threading.Thread(target=lambda: sent.append(runtime.send(run_id, "INC")))
        sender.start()
        if store_kind == "postgres":  # the send waits for the row lock (SQLite: the database's)
            wait_for(
                lambda: bool(
                    store._read(  # type: ignore[attr-defined]
                        "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND "
                        "wait_event_type = 'Lock'"
                    )
                )
            )
    sender.join()
    assert sent and runtime.get(run_id).version == 1  # INC did not overtake FINISH
    assert [e.event["type"] for e in store.pending_events(run_id)] == ["FINISH", "INC"]
    assert Worker(runtime).run_until_idle() == 1
    assert runtime.get(run_id).status == "done"
    assert [d.event["type"] for d in runtime.dead_letters(run_id)] == ["INC"]


def test_a_call_end_from_rest_waits_for_a_sender_holding_the_row_and_applies_its_event_first(
    store: Store, store_kind: str
) -> None:
    if store_kind != "postgres":
        pytest.skip("only PostgreSQL writes a call's end with its step from rest")
    held = threading.Event()
    failed: list[BaseException] = []

    def hold_and_queue() -> None:
        # another sender holds the row (locked, not updated) and queues PING in its
        # transaction, and lets go once the call's end waits for the row
        try:
            with store._write() as conn:  # type: ignore[attr-defined]
                (run_id,) = store._exec(  # type: ignore[attr-defined]
                    conn,
                    "SELECT id FROM workflow_runs WHERE workflow_name = 'pinged'" + store._LOCK_ROW,  # type: ignore[attr-defined]
                ).fetchone()
                store._exec(  # type: ignore[attr-defined]
                    conn,
                    "INSERT INTO workflow_inbox (run_id, event, created_at) VALUES (?, ?, ?)",
                    (run_id, store._j({"type": "PING"}), store._t(T0)),  # type: ignore[attr-defined]
                )
                held.set()
                wait_for(
                    lambda: bool(
                        store._read(  # type: ignore[attr-defined]
                            "SELECT 1 FROM pg_stat_activity WHERE ? = ANY(pg_blocking_pids(pid))",
                            (conn.info.backend_pid,),
                        )
                    )
                )
        except BaseException as error:
            failed.append(error)
            held.set()

    holder = threading.Thread(target=hold_and_queue)

    def job(_input: Any) -> str:
        holder.start()
        held.wait(30)
        return "ok"

    pinged = create_machine(
        {
            "id": "pinged",
            "initial": "working",
            "context": {"pings": 0},
            "states": {
                "working": {
                    "invoke": {"id": "job", "src": "job", "onDone": "finished"},
                    "on": {"PING": {"actions": "ping"}},
                },
                "finished": {"type": "final"},
            },
        },
        actors={"job": job},
        actions={"ping": assign({"pings": lambda c, e: c["pings"] + 1})},
    )
    runtime = Runtime(store, [pinged])
    result = Inline(runtime).run("pinged")
    holder.join(30)
    assert not failed and not holder.is_alive()
    # the call's end was not written with its step from rest: the result queued behind PING
    assert (result.status, result.snapshot.context) == ("active", {"pings": 0})
    queued = [e.event["type"] for e in store.pending_events(result.run_id)]
    assert queued == ["PING", "xstate.done.actor.job"]
    assert Worker(runtime).run_until_idle() == 1  # a worker applies both, in order
    run = runtime.get(result.run_id)
    assert (run.status, run.snapshot["context"]) == ("done", {"pings": 1})
    assert [e.event["type"] for e in store.list_events(result.run_id)] == queued
    assert runtime.dead_letters(result.run_id) == []


def test_a_step_from_rest_writes_what_a_step_from_the_locked_row_writes(
    store: Store, store_kind: str, clock: SimulatedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = Runtime(store, [counter], clock=clock)
    seen = _from_rest(store, monkeypatch)
    pairs = [
        (["INC", "INC", "FINISH"], runtime.start("counter"), runtime.start("counter")),
        ([{"type": "CALL", "n": 3}], runtime.start("counter"), runtime.start("counter")),
    ]
    for events, rested, read in pairs:
        for event in events:
            clock.advance(10)
            runtime.send(rested, event)
            runtime.resting.drop(read)  # this one is read under its lock, as before
            runtime.send(read, event)

    def row(run_id: str) -> tuple[Any, ...]:
        r = runtime.get(run_id)
        return (
            r.state,
            r.snapshot,
            r.status,
            r.version,
            r.wake_at,
            r.lease_owner,
            r.lease_expires_at,
            r.attempt_count,
            r.last_error,
            r.claim_count,
            r.updated_at,
            r.completed_at,
            r.failed_at,
            r.workflow_version,
            [
                (e.step, e.effect_index, e.kind, e.payload, e.status)
                for e in store.list_effects(run_id)
            ],
            _journal(store, run_id),
            store.pending_events(run_id),
            store.dead_letters(run_id),
        )

    for _, rested, read in pairs:
        assert row(rested) == row(read)
    assert [runtime.get(r).status for _, r, _ in pairs] == ["done", "active"]
    assert seen == ([True] * 4 if store_kind == "postgres" else [])


def test_a_workers_steps_keep_the_row_of_a_run_sent_to_here_and_add_no_other(
    store: Store, store_kind: str, clock: SimulatedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    CALLS.clear()
    runtime = Runtime(store, [counter], clock=clock)
    seen = _from_rest(store, monkeypatch)
    run_id = runtime.start("counter")
    runtime.send(run_id, {"type": "CALL", "n": 5})  # from rest; its effect is a worker's
    assert runtime.resting.get(run_id) is None  # not at rest: an effect waits
    assert Worker(runtime).run_until_idle() == 1  # this process's worker steps it to rest
    rest = runtime.resting.get(run_id)
    assert rest is not None and (rest.version, rest.lease_owner) == (3, None)
    runtime.send(run_id, "INC")  # from that row
    assert (runtime.get(run_id).snapshot["context"], CALLS) == ({"n": 1}, [5])
    assert seen == ([True, True] if store_kind == "postgres" else [])
    working = Runtime(store, [counter], clock=clock, step_in_send=False)
    other = working.start("counter")
    working.resting.drop(other)  # a process that only works: it started nothing
    working.send(other, {"type": "CALL", "n": 6})  # queued: the worker applies it, then calls
    assert Worker(working).run_until_idle() == 2
    assert working.resting.get(other) is None and working.resting.get(run_id) is None
