"""A burst of call ends (`RunDriver.finish_calls`, `Store.finish_calls`): each result is applied
by its run's step in the burst's one transaction exactly as one end at a time applies it from
the run's locked row, on every store; PostgreSQL writes the steps of the runs still at rest
as the executor read them in one statement, each under its own fence, and leaves a run that
moved on to the locked read and a call its holder lost to be dropped."""

from __future__ import annotations

from typing import Any

import pytest

from persistence.driver import RunDriver
from persistence.runtime import Runtime
from persistence.stores import CallEnd, CallFinish, CallRecord, Store
from statecharts import SimulatedClock, assign, create_machine
from statecharts.events import done_actor_event_type

T0 = 1_700_000_000_000
OWNER = "calls/1"


def _double(x: int) -> int:
    return 2 * x


machine = create_machine(
    {
        "id": "doubling",
        "initial": "calling",
        "context": lambda input: {"x": input["x"], "got": None},
        "states": {
            "calling": {
                "invoke": {
                    "id": "double",
                    "src": "double",
                    "input": lambda context, event: context["x"],
                    "onDone": {"target": "checking", "actions": "keep"},
                },
                "on": {"POKE": {"actions": assign({"x": lambda c, e: c["x"] + 100})}},
            },
            "checking": {
                "after": {"5000": "finished"},
                "on": {"FINISH": "finished"},
            },
            "finished": {"type": "final"},
        },
        "output": lambda context, event: context["got"],
    },
    actors={"double": _double},
    actions={"keep": assign({"got": lambda context, event: event["output"]})},
)


def _end(call: CallRecord, owner: str = OWNER) -> tuple[CallFinish, str, dict[str, Any]]:
    event = {"type": done_actor_event_type(call.call_id), "output": 2 * call.payload["input"]}
    return (
        CallFinish(call.idempotency_key, owner, call.attempt, "done", CallEnd("done")),
        (call.run_id),
        event,
    )


def _row(store: Store, run_id: str) -> tuple[Any, ...]:
    run = store.get_run(run_id)
    return (
        run.state,
        run.snapshot,
        run.status,
        run.version,
        run.wake_at,
        run.lease_owner,
        run.lease_expires_at,
        run.attempt_count,
        run.last_error,
        run.updated_at,
        run.workflow_version,
        [
            (c.status, c.owner, c.attempt, c.lease_expires_at, c.error)
            for c in store.list_calls(run_id)
        ],
        [(a.attempt, a.worker, a.outcome, a.ended_at) for a in store.call_attempts(run_id)],
        [(e.event["type"], e.state_before, e.state_after) for e in store.list_events(run_id)],
        [e.event for e in store.pending_events(run_id)],
        store.dead_letters(run_id),
    )


def test_a_burst_of_ends_writes_what_ends_one_at_a_time_from_the_locked_row_write(
    store: Store, store_kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = SimulatedClock(start=T0)
    starter = Runtime(store, [machine], clock=clock)  # another process started the runs
    runtime = Runtime(store, [machine], clock=clock)
    driver = RunDriver(runtime, OWNER, 30_000, 100, calls=None)
    burst = [starter.start("doubling", input={"x": i}) for i in range(6)]
    alone = [starter.start("doubling", input={"x": i}) for i in range(6)]
    clock.advance(10)
    calls = {c.run_id: c for c in store.claim_calls(OWNER, clock.now(), 30_000, 100)}
    read = store.get_runs(burst + alone)  # as the executor reads them when it takes the calls
    clock.advance(10)
    groups = (burst, alone)  # what differs from one end to another, alike in both groups
    for group in groups:
        starter.send(group[1], "POKE")  # moved on: the row read is stale
        store.heartbeat_calls(OWNER, {calls[group[2]].idempotency_key: None}, clock.now(), 1)
        runtime.cancel(group[3])  # ended: its call stopped
    clock.advance(10)
    for group in groups:
        store.claim_calls("calls/2", clock.now(), 30_000, 1, group[2])  # taken over
    clock.advance(10)
    tried: list[int] = []
    burst_of = getattr(store, "_finish_burst_from_rest", None)
    if burst_of is not None:

        def spy(*args: Any) -> Any:
            written = burst_of(*args)
            tried.append(len(written))
            return written

        monkeypatch.setattr(store, "_finish_burst_from_rest", spy)
    sent = driver.finish_calls([_end(calls[r]) for r in burst], clock.now(), read)
    one_by_one = []
    for run_id in alone:
        finish, _, event = _end(calls[run_id])
        one_by_one.append(driver.send(run_id, event, clock.now(), finish=finish))
    kept = [True, True, False, False, True, True]  # (the lost and the stopped: dropped)
    assert [bool(i) for i in sent] == [bool(i) for i in one_by_one] == kept
    for b, a in zip(burst, alone, strict=True):
        assert _row(store, b) == _row(store, a)
    got = [store.get_run(r).snapshot["context"]["got"] for r in burst]
    assert got == [0, 2, None, None, 8, 10]
    assert tried == ([3] if store_kind == "postgres" else [])  # (at rest as read: 0, 4, 5)
