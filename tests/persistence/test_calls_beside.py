"""Calls run beside their run (issue 40): one chart, the same answers in memory and durably.

Each chart here invokes a call that takes real time (about a second) while timers fire, events
arrive, the invoking state is left or the run is cancelled. The same chart runs in memory
(`create_async_actor`, the asyncio runtime) and durably (`Runtime` + a `Worker` in this process,
on SQLite and PostgreSQL), and the final state, context and status are compared. Before calls
ran beside their runs, the durable side held the run for the whole call: the deadline lost to
the late result, the events were applied after it (and dead-lettered when it ended the run), a
cancel waited for the call.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from persistence.outbox import current_idempotency_key, current_run_id, heartbeat
from persistence.runtime import Runtime
from persistence.stores import Store
from persistence.worker import Worker
from statecharts import Machine, assign, create_machine
from statecharts.async_actor import create_async_actor
from tests.persistence.conftest import wait_for

CALL_S = 1.2
"""How long the slow call takes: long beside the deadlines and events of these charts."""

Script = list[tuple[float, Any]]
"""Events sent at seconds after the start (`"CANCEL"`: cancel the run)."""


def slow_call(ledger: list[str]) -> Callable[[Any], str]:
    def call(_input: Any, idempotency_key: str = "") -> str:
        ledger.append(f"start {idempotency_key}")
        deadline = time.monotonic() + CALL_S
        while time.monotonic() < deadline:
            if not heartbeat():  # stopped: return early, the result is dropped anyway
                ledger.append("stopped")
                return "late"
            time.sleep(0.02)
        ledger.append("end")
        return "paid"

    return call


def chart(
    ledger: list[str],
    *,
    after_ms: int | None = None,
    timeout_ms: int | None = None,
) -> Machine:
    calling: dict[str, Any] = {
        "invoke": {
            "src": "charge",
            "onDone": {"target": "done", "actions": assign({"result": lambda c, e: e["output"]})},
            "onError": {
                "target": "failed",
                "actions": assign({"error": lambda c, e: e["error"]["name"]}),
            },
        },
        "on": {
            "PING": {"actions": assign({"pings": lambda c, e: c["pings"] + 1})},
            "LEAVE": "left",
        },
    }
    if after_ms is not None:
        calling["after"] = {str(after_ms): "timed_out"}
    if timeout_ms is not None:
        calling["invoke"]["timeout"] = timeout_ms
    return create_machine(
        {
            "id": "payment",
            "initial": "calling",
            "context": {"pings": 0, "result": None, "error": None},
            "states": {
                "calling": calling,
                "done": {"type": "final"},
                "failed": {"type": "final"},
                "left": {
                    "on": {"PING": {"actions": assign({"pings": lambda c, e: c["pings"] + 1})}}
                },
                "timed_out": {"type": "final"},
            },
        },
        actors={"charge": slow_call(ledger)},
    )


def in_memory(machine: Machine, script: Script, settle_s: float) -> tuple[str, dict[str, Any]]:
    async def main() -> tuple[str, dict[str, Any]]:
        actor = create_async_actor(machine).start()
        start = time.monotonic()
        for at, event in script:
            await asyncio.sleep(max(0.0, at - (time.monotonic() - start)))
            if event == "CANCEL":
                actor.stop()
            else:
                actor.send(event)
        await asyncio.sleep(max(0.0, settle_s - (time.monotonic() - start)))
        snapshot = actor.get_snapshot()
        actor.stop()
        status = "cancelled" if snapshot.status == "stopped" else snapshot.status
        return status + ":" + ",".join(snapshot.active_leaves()), dict(snapshot.context)

    return asyncio.run(main())


def durably(runtime: Runtime, script: Script, settle_s: float) -> tuple[str, dict[str, Any]]:
    run_id = runtime.start("payment")
    start = time.monotonic()
    for at, event in script:
        time.sleep(max(0.0, at - (time.monotonic() - start)))
        if event == "CANCEL":
            runtime.cancel(run_id)
        else:
            runtime.send(run_id, event)
    time.sleep(max(0.0, settle_s - (time.monotonic() - start)))
    run = runtime.store.get_run(run_id)
    status = "active" if run.status == "active" else run.status
    return f"{status}:{run.state}", dict(run.snapshot["context"])


def one_call(name: str, fn: Callable[..., Any]) -> Machine:
    """Workflow `name`: its first state calls `fn` (with the run's input `x`, if it has one)
    and the run ends `done` with its result; `LEAVE` leaves the call's state for `left`."""
    return create_machine(
        {
            "id": name,
            "initial": "calling",
            "context": lambda input: {"x": (input or {}).get("x")},
            "states": {
                "calling": {
                    "invoke": {"src": "fn", "input": lambda c, e: c["x"], "onDone": "done"},
                    "on": {"LEAVE": "left"},
                },
                "left": {},
                "done": {"type": "final"},
            },
        },
        actors={"fn": fn},
    )


CASES: dict[str, tuple[dict[str, Any], Script, str]] = {
    "deadline_wins_over_a_late_result": ({"after_ms": 400}, [], "done:timed_out"),
    "events_during_a_call_are_applied_at_once": (
        {},
        [(0.2, "PING"), (0.4, "PING"), (0.6, "PING")],
        "done:done",
    ),
    "leaving_the_state_drops_the_late_result": ({}, [(0.3, "LEAVE")], "active:left"),
    "a_call_timeout_is_an_error_onError_matches": ({"timeout_ms": 400}, [], "done:failed"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_same_answers_in_memory_and_durably(case: str, worker_of: Any) -> None:
    options, script, expected = CASES[case]
    settle = CALL_S + 0.8
    memory_ledger: list[str] = []
    memory = in_memory(chart(memory_ledger, **options), script, settle)
    ledger: list[str] = []
    durable = durably(worker_of(chart(ledger, **options)), script, settle)
    assert memory[0] == expected, memory
    assert durable == memory
    if case == "events_during_a_call_are_applied_at_once":
        assert durable[1]["pings"] == 3 and durable[1]["result"] == "paid"
    if case == "a_call_timeout_is_an_error_onError_matches":
        assert durable[1]["error"] == "CallTimeoutError"


def test_a_cancel_during_a_call_wins_at_once_and_stops_the_call(worker_of: Any) -> None:
    ledger: list[str] = []
    runtime = worker_of(chart(ledger))
    run_id = runtime.start("payment")
    wait_for(lambda: any(x.startswith("start") for x in ledger), 10)
    before = time.monotonic()
    assert runtime.cancel(run_id) == "cancelled"
    assert time.monotonic() - before < CALL_S / 2
    run = runtime.store.get_run(run_id)
    assert run.status == "cancelled"
    wait_for(lambda: "stopped" in ledger, 10)  # the call was told (heartbeat() said so)
    (attempt,) = runtime.store.call_attempts(run_id)
    assert attempt.outcome == "stopped"
    assert runtime.store.get_run(run_id).status == "cancelled"
    assert runtime.store.dead_letters(run_id) == []


def test_a_result_of_a_left_state_is_dropped_and_the_attempt_says_so(worker_of: Any) -> None:
    ledger: list[str] = []
    runtime = worker_of(chart(ledger))
    run_id = runtime.start("payment")
    wait_for(lambda: any(x.startswith("start") for x in ledger), 10)
    runtime.send(run_id, "LEAVE")
    wait_for(lambda: runtime.store.get_run(run_id).state == "left", 10)
    runtime.send(run_id, "PING")
    wait_for(lambda: "stopped" in ledger, 10)
    time.sleep(0.3)
    run = runtime.store.get_run(run_id)
    assert (run.status, run.state, run.snapshot["context"]["pings"]) == ("active", "left", 1)
    (call,) = runtime.store.list_calls(run_id)
    assert call.status == "stopped" and call.error == "stopped: its invoking state was left"
    assert [a.outcome for a in runtime.store.call_attempts(run_id)] == ["stopped"]
    assert runtime.store.dead_letters(run_id) == []


def test_1000_events_sent_during_one_call_are_each_applied_once_in_order(worker_of: Any) -> None:
    ledger: list[str] = []
    sent = threading.Event()

    def charge(_input: Any) -> str:  # runs until every event was sent (30 s at most)
        ledger.append("start")
        sent.wait(30)
        ledger.append("end")
        return "paid"

    machine = create_machine(
        {
            "id": "payment",
            "initial": "calling",
            "context": {"seen": []},
            "states": {
                "calling": {
                    "invoke": {"src": "charge", "onDone": "done"},
                    "on": {
                        "N": {"actions": assign({"seen": lambda c, e: [*c["seen"], e["n"]][-5:]})}
                    },
                },
                "done": {"type": "final"},
            },
        },
        actors={"charge": charge},
    )
    runtime = worker_of(machine)
    run_id = runtime.start("payment")
    wait_for(lambda: any(x.startswith("start") for x in ledger), 10)
    for n in range(1000):
        runtime.send(run_id, {"type": "N", "n": n})
    assert runtime.store.get_run(run_id).state == "calling"  # all sent during the call
    sent.set()
    wait_for(lambda: runtime.store.get_run(run_id).status == "done", 60)
    run = runtime.store.get_run(run_id)
    journal = [e.event for e in runtime.store.list_events(run_id)]
    applied = [e["n"] for e in journal if e.get("type") == "N"]
    assert applied == list(range(1000))
    assert run.snapshot["context"]["seen"] == [995, 996, 997, 998, 999]
    assert ledger.count("end") == 1 and runtime.store.dead_letters(run_id) == []


def test_every_attempt_is_shown_by_runs_show_and_the_run_page(
    store: Store, tmp_path: Any, capsys: Any
) -> None:
    """A charge fails once (a transient failure of its call site), then succeeds: its two
    attempts, one idempotency key, are recorded and shown with outcome and error."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from persistence.cli import main
    from persistence.ui import create_app

    keys: list[str] = []

    def charge(_input: Any, idempotency_key: str = "") -> str:
        keys.append(idempotency_key)
        if len(keys) == 1:
            raise ConnectionError("the card network reset the connection")
        return "paid"

    machine = create_machine(
        {
            "id": "payment",
            "initial": "calling",
            "states": {
                "calling": {"invoke": {"src": "charge", "onDone": "done", "transient": True}},
                "done": {"type": "final"},
            },
        },
        actors={"charge": charge},
    )
    runtime = Runtime(store, [machine])
    run_id = runtime.start("payment")
    worker = Worker(runtime)
    worker.run_until_idle()
    while runtime.get(run_id).status == "active":  # (the retry waits out its backoff)
        time.sleep(0.05)
        worker.run_until_idle()
    assert len(keys) == 2 and keys[0] == keys[1]
    attempts = store.call_attempts(run_id)
    assert [(a.attempt, a.outcome, a.error_name) for a in attempts] == [
        (1, "retrying", "ConnectionError"),
        (2, "done", None),
    ]
    assert "the card network reset" in (attempts[0].message or "")
    assert "Traceback" in (attempts[0].traceback or "")

    if store.url.startswith("sqlite"):  # the command line reads the same store
        assert main(["runs", "show", run_id, "--store", store.url]) == 0
        shown = capsys.readouterr().out
        assert '"outcome": "retrying"' in shown and '"outcome": "done"' in shown
    with TestClient(create_app(store, [machine])) as client:
        page = client.get(f"/runs/{run_id}").text
    assert 'id="calls"' in page and "retrying" in page and "ConnectionError" in page
    assert attempts[0].idempotency_key in page  # the call's key, on its row


def test_an_event_that_arrived_before_a_deadline_wins_over_the_overdue_timer(store: Store) -> None:
    """Issue 47 R7: workers come back late (a deploy); the payment queued at 0.3 s beats the
    1 s deadline that is overdue by the time a worker steps the run, as it does in memory."""
    machine = create_machine(
        {
            "id": "invoice",
            "initial": "waiting",
            "states": {
                "waiting": {"after": {"1000": "expired"}, "on": {"PAY": "paid"}},
                "expired": {"type": "final"},
                "paid": {"type": "final"},
            },
        }
    )
    runtime = Runtime(store, [machine])
    run_id = runtime.start("invoice")
    time.sleep(0.3)
    store.send_event(run_id, {"type": "PAY"}, runtime.clock.now())  # queued: no worker is up
    time.sleep(1.0)  # the deadline passes with the event still queued
    Worker(runtime).run_until_idle()
    run = runtime.get(run_id)
    assert (run.status, run.state) == ("done", "paid")
    assert store.dead_letters(run_id) == []
    assert in_memory(machine, [(0.3, "PAY")], 1.3)[0] == "done:paid"


def test_a_steps_actions_run_before_the_calls_it_starts(worker_of: Any) -> None:
    """In memory an entry action runs before the state's invoked actor starts; durably the
    action is an effect its run executes under a lease and the call runs beside the run:
    the call is not started until the action is done (never both at once)."""
    order: list[str] = []

    def note(_context: Any, _event: Any) -> None:
        order.append("note started")
        time.sleep(0.3)
        order.append("note done")

    def ship(_input: Any) -> str:
        order.append("ship started")
        return "shipped"

    machine = create_machine(
        {
            "id": "payment",
            "initial": "shipping",
            "states": {
                "shipping": {"entry": "note", "invoke": {"src": "ship", "onDone": "done"}},
                "done": {"type": "final"},
            },
        },
        actions={"note": note},
        actors={"ship": ship},
    )
    runtime = worker_of(machine)
    run_id = runtime.start("payment")
    wait_for(lambda: runtime.get(run_id).status == "done", 20)
    assert order == ["note started", "note done", "ship started"]


def test_a_burst_of_call_ends_is_recorded_together_and_each_result_applied_once(
    worker_of: Any,
) -> None:
    """40 coroutine calls end at the same instant (one left its state first): the executor
    records the burst in one transaction, the worker's run threads apply each result once, and
    the stopped call's result is dropped, as one end at a time does."""
    release = time.time() + 1.5

    async def together(x: int) -> int:
        await asyncio.sleep(max(0.0, release - time.time()))
        return x * 10

    machine = create_machine(
        {
            "id": "burst",
            "initial": "calling",
            "context": lambda input: {"x": input["x"]},
            "states": {
                "calling": {
                    "invoke": {
                        "src": "together",
                        "input": lambda c, e: c["x"],
                        "onDone": {
                            "target": "done",
                            "actions": assign({"x": lambda c, e: e["output"]}),
                        },
                    },
                    "on": {"LEAVE": "left"},
                },
                "left": {},
                "done": {"type": "final"},
            },
            "output": lambda c, e: c["x"],
        },
        actors={"together": together},
    )
    runtime = worker_of(machine)
    ids = [runtime.start("burst", input={"x": i}) for i in range(40)]
    wait_for(
        lambda: all(c.status == "running" for i in ids for c in runtime.store.list_calls(i)), 10
    )
    runtime.send(ids[0], "LEAVE")
    wait_for(lambda: all(runtime.store.get_run(i).status == "done" for i in ids[1:]), 30)
    assert [runtime.store.get_run(i).snapshot["output"] for i in ids[1:]] == [
        i * 10 for i in range(1, 40)
    ]
    left = runtime.store.get_run(ids[0])
    assert (left.status, left.state) == ("active", "left")
    assert [a.outcome for a in runtime.store.call_attempts(ids[0])] == ["stopped"]
    for run_id in ids[1:]:
        assert [a.outcome for a in runtime.store.call_attempts(run_id)] == ["done"]
        assert runtime.store.dead_letters(run_id) == []
    ended_at = [runtime.store.list_calls(i)[0].updated_at for i in ids[1:]]
    assert max(ended_at.count(t) for t in ended_at) > 1, "no two ends were recorded together"


def test_a_coroutine_call_stopped_while_it_waits_is_cancelled(worker_of: Any) -> None:
    """Leaving the invoking state stops its coroutine call: the executor learns it at its next
    lease renewal and cancels the coroutine's task (`CancelledError` at its `await`), long
    before the call would have ended; its result is never applied."""
    seen: list[str] = []

    async def wait_long(_input: Any) -> str:
        seen.append("started")
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return "late"

    runtime = worker_of(one_call("stopping", wait_long))
    run_id = runtime.start("stopping")
    wait_for(lambda: seen == ["started"], 10)
    runtime.send(run_id, "LEAVE")
    wait_for(lambda: seen == ["started", "cancelled"], 10)
    run = runtime.store.get_run(run_id)
    assert (run.status, run.state) == ("active", "left")
    assert [a.outcome for a in runtime.store.call_attempts(run_id)] == ["stopped"]


def test_a_coroutine_call_stopped_before_its_task_started_never_runs(worker_of: Any) -> None:
    """A coroutine call handed to the executor while its loop is busy (another call's code
    blocks it, as careless code does), then stopped before the loop got to start it: its
    coroutine never runs, its attempt is recorded stopped, and the executor's next call runs."""
    hogging = threading.Event()
    seen: list[str] = []

    async def hog(_input: Any) -> str:
        hogging.set()
        time.sleep(2.5)  # (blocks the executor's loop: longer than a lease renewal, 1 s here)
        return "hogged"

    async def wait_long(_input: Any) -> str:
        seen.append("started")
        await asyncio.sleep(60)
        return "late"

    machine = create_machine(
        {
            "id": "two",
            "initial": "choose",
            "context": lambda input: {"hog": input["hog"]},
            "states": {
                "choose": {"always": [{"guard": "hog", "target": "hogging"}, "calling"]},
                "hogging": {"invoke": {"src": "hog", "onDone": "done"}},
                "calling": {
                    "invoke": {"src": "wait_long", "onDone": "done"},
                    "on": {"LEAVE": "left"},
                },
                "left": {},
                "done": {"type": "final"},
            },
        },
        actors={"hog": hog, "wait_long": wait_long},
        guards={"hog": lambda context, event: context["hog"]},
    )
    runtime = worker_of(machine)
    hogged = runtime.start("two", {"hog": True})
    assert hogging.wait(10)
    stopped = runtime.start("two", {"hog": False})  # (its task waits for the loop)
    runtime.send(stopped, "LEAVE")
    wait_for(lambda: runtime.store.get_run(hogged).status == "done", 10)
    after = runtime.start("two", {"hog": False})
    wait_for(lambda: seen == ["started"], 10)  # the next call ran; the stopped one never did
    runtime.send(after, "LEAVE")
    assert runtime.store.get_run(stopped).state == "left"
    assert [a.outcome for a in runtime.store.call_attempts(stopped)] == ["stopped"]
    assert runtime.store.dead_letters(stopped) == []


def test_a_worker_stopped_during_a_coroutine_call_unwinds_it_on_its_loop(store: Store) -> None:
    """`Worker.stop` while a coroutine call waits: the call's task is cancelled and unwinds on
    the executor's loop before the stop returns (its `finally` runs there, in its own context),
    not later when the garbage collector closes it in another thread (where resetting its
    context variables raised); the call itself is left to its lease, for another worker."""
    seen: list[str] = []

    async def wait_long(_input: Any) -> str:
        seen.append("started")
        try:
            await asyncio.sleep(60)
        finally:
            seen.append("unwound")
        return "late"

    runtime = Runtime(store, [one_call("waiting", wait_long)])
    worker = Worker(runtime, 2, poll_ms=50, lease_ms=3_000)
    thread = threading.Thread(target=worker.run)
    thread.start()
    run_id = runtime.start("waiting")
    wait_for(lambda: seen == ["started"], 10)
    worker.stop()
    thread.join(timeout=30)
    assert seen == ["started", "unwound"]
    assert runtime.store.get_run(run_id).status == "active"
    assert [c.status for c in runtime.store.list_calls(run_id)] == ["running"]  # its lease's


def test_an_ended_coroutine_call_leaves_no_garbage_cycle(worker_of: Any) -> None:
    """Each ended coroutine call is freed when it ends: nothing of it waits for the garbage
    collector. (Its attempt and its future once held each other: every call's records, task,
    future and lock then lived on until a full collection, which at 10,000 waiting calls cost
    more CPU than the calls' steps.)"""

    async def echo(x: int) -> int:
        await asyncio.sleep(0.01)
        return x

    runtime = worker_of(one_call("echoing", echo))
    first = runtime.start("echoing", {"x": 0})  # (the loop, pool and connections made first)
    wait_for(lambda: runtime.store.get_run(first).status == "done", 10)
    gc.collect()
    gc.disable()
    try:
        ids = [runtime.start("echoing", {"x": i}) for i in range(40)]
        wait_for(lambda: all(runtime.store.get_run(i).status == "done" for i in ids), 30)
        unreachable = gc.collect()
    finally:
        gc.enable()
    assert unreachable < 40, f"{unreachable} objects in cycles after 40 calls"


def test_a_coroutine_call_sees_its_own_key_run_and_stop_and_its_neighbours_theirs(
    worker_of: Any,
) -> None:
    """Coroutine calls awaiting side by side on the executor's loop each see their own
    idempotency key and run (`current_idempotency_key`, `current_run_id`), and `heartbeat()`
    says each is still wanted, a neighbour's stop cancelling only the neighbour; after the
    await too (each task's context holds them for its whole life), and none is left here."""
    seen: dict[str, list[Any]] = {}
    gate = threading.Event()

    async def record(x: int) -> int:
        before = (current_idempotency_key(), current_run_id(), heartbeat())
        seen[f"{x} began"] = [before]
        try:
            while not gate.is_set():
                await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            seen[f"{x} cancelled"] = [before]
            raise
        seen[str(x)] = [before, (current_idempotency_key(), current_run_id(), heartbeat())]
        return x

    runtime = worker_of(one_call("recording", record))
    ids = [runtime.start("recording", {"x": i}) for i in range(3)]
    wait_for(lambda: all(f"{i} began" in seen for i in range(3)), 10)
    runtime.send(ids[1], "LEAVE")  # (run 1's call is stopped: its task cancelled)
    wait_for(lambda: "1 cancelled" in seen, 10)
    gate.set()
    wait_for(lambda: all(runtime.store.get_run(i).status == "done" for i in (ids[0], ids[2])), 10)
    keys = []
    for i in (0, 2):
        (key, run, wanted), after = seen[str(i)]
        assert (run, wanted) == (ids[i], True) and after == (key, run, wanted)
        keys.append(key)
    assert all(keys) and keys[0] != keys[1]
    assert seen["1 cancelled"][0][1] == ids[1] and "1" not in seen
    assert current_idempotency_key() is None and current_run_id() is None


def test_a_coroutine_call_that_does_not_take_its_input_fails_its_attempt(worker_of: Any) -> None:
    """A coroutine function that cannot take the invoke's input fails its one attempt with the
    `TypeError` and its traceback, as one that raises once it runs does; the run is told."""

    async def takes_nothing() -> str:
        return "never"

    runtime = worker_of(one_call("mistyped", takes_nothing))
    run_id = runtime.start("mistyped", {"x": 1})
    wait_for(lambda: any(a.outcome for a in runtime.store.call_attempts(run_id)), 10)
    (attempt,) = runtime.store.call_attempts(run_id)
    assert (attempt.outcome, attempt.error_name) == ("failed", "TypeError")
    assert "takes_nothing" in (attempt.message or "") and attempt.traceback
    wait_for(lambda: runtime.store.get_run(run_id).status != "active", 10)
