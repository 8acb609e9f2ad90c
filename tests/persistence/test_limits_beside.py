"""Limited calls run beside their run too: a call waiting for its limit holds no run.

A call site with a limit (`invoke: {src, limit}`) and every call of a workflow with a workflow
limit take their places when their executor starts them, not in their run's step: a call that
gets none waits (its row says why), queued in arrival order, while its run applies its events,
fires its timers and can be cancelled; leaving the invoking state stops the queued call (it
never runs); a call's end hands its slot to the next queued call. Each call here takes about
two seconds and counts itself in flight, so a limit of one is checked from inside the calls.
Durable runs (`Runtime` + a `Worker` in this process, SQLite file and PostgreSQL) are compared
with the same chart in memory (`create_async_actor`) where the story allows it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from msgspec import structs

from persistence.capacity import Limit
from persistence.outbox import heartbeat
from persistence.runtime import Runtime
from persistence.stores import Store
from persistence.stores.capacity import CAPACITY
from persistence.worker import Worker
from statecharts import Machine, assign, create_machine
from tests.persistence.conftest import wait_for
from tests.persistence.test_calls_beside import in_memory

CALL_S = 2.0
"""How long each limited call takes."""


class Downstream:
    """A fake downstream that records its calls (by the run's `who`) and how many were in
    flight at once, as the calls themselves saw it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most = 0
        self.started: dict[str, float] = {}
        self.ended: dict[str, float] = {}

    def call(self, request: Any) -> str:
        who = str(request)
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            self.started[who] = time.monotonic()
        try:
            deadline = time.monotonic() + CALL_S
            while time.monotonic() < deadline:
                if not heartbeat():  # stopped: return early, its result is dropped anyway
                    return "stopped"
                time.sleep(0.02)
            return f"paid {who}"
        finally:
            with self.lock:
                self.in_flight -= 1
                self.ended[who] = time.monotonic()


def chart(
    downstream: Downstream, *, limit: str | None = "one", given: dict[str, Any] | None = None
) -> Machine:
    """A payment whose `charge` goes through `limit`; a run whose context says `deadline`
    gives up after 1.2 s in `calling` (an `after` on the invoking state). `given`: the
    context its input would make (in memory, where a run has no input)."""
    invoke: dict[str, Any] = {
        "src": "charge",
        "input": lambda c, e: c["who"],
        "onDone": {"target": "done", "actions": assign({"result": lambda c, e: e["output"]})},
    }
    if limit is not None:
        invoke["limit"] = limit
    return create_machine(
        {
            "id": "payment",
            "initial": "calling",
            "context": lambda input: {"pings": 0, "result": None, **(given or input or {})},
            "states": {
                "calling": {
                    "invoke": invoke,
                    "after": {
                        "1200": {"target": "timed_out", "guard": lambda c, e: bool(c["deadline"])}
                    },
                    "on": {"PING": {"actions": assign({"pings": lambda c, e: c["pings"] + 1})}},
                },
                "done": {"type": "final"},
                "timed_out": {"type": "final"},
            },
        },
        actors={"charge": downstream.call},
    )


def waits(runtime: Runtime, run_id: str) -> str | None:
    """What the run's call waits for (its row says), if it waits."""
    return next((c.waiting_for for c in runtime.store.list_calls(run_id) if c.waiting_for), None)


def state(runtime: Runtime, run_id: str) -> tuple[str, str, dict[str, Any]]:
    run = runtime.store.get_run(run_id)
    return run.status, run.state, dict(run.snapshot["context"])


def queued_behind(
    runtime: Runtime, downstream: Downstream, second: dict[str, Any], limit: str = "one"
) -> tuple[str, str]:
    """A first run whose call is in flight, then a run (`second`'s input) whose call waits
    for `limit` behind it, its row saying so: their ids."""
    first = runtime.start("payment", {"who": "first", "deadline": False})
    wait_for(lambda: "first" in downstream.started, 10)
    queued = runtime.start("payment", second)
    wait_for(lambda: waits(runtime, queued) == f"{CAPACITY}: {limit}", 10)
    return first, queued


def test_a_queued_call_waits_beside_its_run_which_goes_on_and_can_leave(
    worker_of: Callable[..., Runtime],
) -> None:
    downstream = Downstream()
    runtime = worker_of(chart(downstream), limits={"one": Limit(max_in_flight=1)})
    first, left = queued_behind(runtime, downstream, {"who": "left", "deadline": True})
    runtime.send(left, "PING")
    runtime.send(left, "PING")
    wait_for(lambda: state(runtime, left)[2]["pings"] == 2, 10)  # applied during the wait
    assert state(runtime, left)[:2] == ("active", "calling")
    third = runtime.start("payment", {"who": "third", "deadline": False})
    wait_for(lambda: waits(runtime, third) == f"{CAPACITY}: one", 10)  # queued behind `left`
    # `left`'s deadline fires while its call waits: it leaves, its queued call is stopped
    wait_for(lambda: state(runtime, left)[0] == "done", 10)
    assert "first" in downstream.started and "first" not in downstream.ended
    # the first call's end hands its slot to the next queued call (not to `left`'s, stopped)
    wait_for(lambda: state(runtime, third)[0] == "done", 30)
    wait_for(lambda: state(runtime, first)[0] == "done", 10)
    assert downstream.most == 1  # never two calls at the downstream at once
    assert "left" not in downstream.started  # it never ran
    assert downstream.started["third"] >= downstream.ended["first"]
    (stopped,) = runtime.store.list_calls(left)
    assert (stopped.status, stopped.waiting_for) == ("stopped", None)
    assert runtime.store.call_attempts(left) == []  # waiting is no attempt
    assert [a.outcome for a in runtime.store.call_attempts(third)] == ["done"]
    assert state(runtime, third)[2]["result"] == "paid third"
    assert runtime.store.capacity_usage(runtime.clock.now())[0].in_flight == 0
    # in memory (no limit: its call runs at once) the deadline wins just the same
    memory = in_memory(
        chart(Downstream(), limit=None, given={"who": "left", "deadline": True}),
        [(0.1, "PING"), (0.2, "PING")],
        2.0,
    )
    status, leaf, context = state(runtime, left)
    assert memory == (f"{status}:{leaf}", context)


def test_a_cancel_during_a_limited_call_ends_the_run_at_once_and_frees_the_slot(
    worker_of: Callable[..., Runtime],
) -> None:
    downstream = Downstream()
    runtime = worker_of(chart(downstream), limits={"one": Limit(max_in_flight=1)})
    first, queued = queued_behind(runtime, downstream, {"who": "queued", "deadline": False})
    before = time.monotonic()
    assert runtime.cancel(first) == "cancelled"
    assert time.monotonic() - before < CALL_S / 2  # at once, not when the call returns
    assert state(runtime, first)[0] == "cancelled"
    (stopped,) = runtime.store.list_calls(first)
    assert stopped.status == "stopped"
    # its slot is free once the call has seen the stop (the function returned, told by its
    # `heartbeat()`): never two calls at the downstream, and then at once for the queue
    wait_for(lambda: "first" in downstream.ended, 10)
    wait_for(lambda: "queued" in downstream.started, 10)
    wait_for(lambda: state(runtime, queued)[0] == "done", 30)
    assert downstream.ended["first"] - downstream.started["first"] < CALL_S  # told to stop
    assert downstream.most == 1
    assert [a.outcome for a in runtime.store.call_attempts(first)] == ["stopped"]


def test_a_workflow_limited_runs_events_apply_while_its_call_runs(
    worker_of: Callable[..., Runtime],
) -> None:
    downstream = Downstream()
    runtime = worker_of(
        chart(downstream, limit=None),
        limits={"nightly": Limit(max_in_flight=1)},
        workflow_limits={"payment": "nightly"},
    )
    first, second = queued_behind(
        runtime, downstream, {"who": "second", "deadline": False}, "nightly"
    )
    for _ in range(3):
        runtime.send(first, "PING")
    # its own events do not wait behind its own call for its own limit
    wait_for(lambda: state(runtime, first)[2]["pings"] == 3, 10)
    assert state(runtime, first)[:2] == ("active", "calling")
    assert "first" not in downstream.ended
    wait_for(lambda: state(runtime, second)[0] == "done", 30)
    assert state(runtime, first)[0] == "done"
    assert downstream.most == 1  # at most one run of the workflow working at once
    assert downstream.started["second"] >= downstream.ended["first"]
    assert runtime.store.capacity_usage(runtime.clock.now())[0].in_flight == 0
    memory = in_memory(
        chart(Downstream(), limit=None, given={"who": "first", "deadline": False}),
        [(0.1, "PING"), (0.2, "PING"), (0.3, "PING")],
        CALL_S + 0.5,
    )
    status, leaf, context = state(runtime, first)
    assert memory == (f"{status}:{leaf}", context)


def test_a_limited_call_an_older_release_left_in_its_runs_step_takes_its_place(
    store: Store,
) -> None:
    """A database upgraded while limited calls, recorded by the release before calls ran beside
    their runs, were still pending in their runs' steps (`start_child` effects): they run in
    the step that executes them, and each takes its call site's place first; the run refused
    one waits for it, released, and is woken when the slot is reserved for it."""
    downstream = Downstream()
    runtime = Runtime(store, [chart(downstream)], limits={"one": Limit(max_in_flight=1)})
    now, runs = runtime.clock.now(), []
    for who in ("a", "b"):
        run, outbox, _ = runtime.prepare_run("payment", {"who": who, "deadline": False}, None, now)
        older = [
            structs.replace(e, kind="start_child") for e in outbox
        ]  # as the older release wrote
        store.create_run(structs.replace(run, wake_at=now), older, now)
        runs.append(run.id)
    Worker(runtime).run_until_idle()  # both runs claimed at once, their steps on two threads
    assert downstream.most == 1  # never two calls at the downstream at once
    assert sorted(downstream.started) == ["a", "b"]  # each made once
    for run_id, who in zip(runs, ("a", "b"), strict=True):
        assert state(runtime, run_id)[:2] == ("done", "done")
        assert state(runtime, run_id)[2]["result"] == f"paid {who}"
        assert store.get_run(run_id).waiting_for is None
    assert runtime.store.capacity_usage(runtime.clock.now())[0].in_flight == 0


def test_a_woken_call_whose_run_left_its_state_passes_its_slot_on_at_once(store: Store) -> None:
    """A freed slot is reserved for the first queued call, which is woken; when that call's run
    leaves the invoking state before any executor has claimed it, the step that stops it
    passes the slot to the next queued call at once (before, the slot stood idle until the
    reservation ran out, a lease later, and the next call waited for it)."""
    ended, made = threading.Event(), list[str]()

    def charge(who: str) -> str:
        made.append(who)
        if who == "first":
            assert ended.wait(30)
        return f"paid {who}"

    payment = create_machine(
        {
            "id": "payment",
            "initial": "calling",
            "states": {
                "calling": {
                    "invoke": {
                        "src": "charge",
                        "input": lambda c, e: c["who"],
                        "limit": "one",
                        "onDone": "done",
                    },
                    "on": {"SKIP": "skipped"},
                },
                "done": {"type": "final"},
                "skipped": {"type": "final"},
            },
            "context": lambda input: {"who": input},
        },
        actors={"charge": charge},
    )
    runtime = Runtime(store, [payment], limits={"one": Limit(max_in_flight=1)})
    worker = Worker(runtime)
    runtime.start("payment", "first")
    holding = threading.Thread(target=worker.run_one_call)  # the first call holds the slot
    holding.start()
    wait_for(lambda: made == ["first"], 10)
    second, third = (runtime.start("payment", who) for who in ("second", "third"))
    assert worker.run_one_call() and worker.run_one_call()  # both asked: queued in order
    assert waits(runtime, second) == waits(runtime, third) == f"{CAPACITY}: one"
    ended.set()  # the first call ends: its slot is reserved for the second's, woken
    holding.join(10)
    runtime.send(second, "SKIP")  # the second run leaves before its call was claimed
    assert runtime.get(second).status == "done"
    assert worker.run_one_call()  # the third call has the slot now
    assert made == ["first", "third"]
    assert (runtime.get(third).status, runtime.get(third).state) == ("done", "done")
    assert runtime.store.capacity_usage(runtime.clock.now())[0].in_flight == 0
