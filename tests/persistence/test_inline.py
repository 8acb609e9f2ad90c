"""Runs executed in the caller (`persistence.inline.Inline`) and idle workers woken by starts and
sends (`persistence.wakeup`), on every store: the records a worker writes, fencing of a caller
that lost its lease, a caller SIGKILLed mid-run, NOTIFY across processes on PostgreSQL."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from persistence.inline import Inline
from persistence.outbox import current_idempotency_key
from persistence.runtime import Runtime
from persistence.stores import Store, open_store
from persistence.stores.rules import call_key
from persistence.worker import Worker
from statecharts import SimulatedClock, assign, create_machine

ROOT = Path(__file__).resolve().parents[2]
LEDGER = "STATECHARTS_TEST_INLINE_LEDGER"
KILL_AT = "STATECHARTS_TEST_INLINE_KILL"  # SIGKILL the process inside this step, once


def _record(step: str) -> None:
    """Write the call and its key to the ledger file (what really ran, seen from outside)."""
    path = os.environ.get(LEDGER)
    if path:
        with sqlite3.connect(path, timeout=30) as db:
            db.execute("CREATE TABLE IF NOT EXISTS calls (step text, key text)")
            db.execute("INSERT INTO calls VALUES (?, ?)", (step, current_idempotency_key()))
        if os.environ.get(KILL_AT) == step:
            os.kill(os.getpid(), signal.SIGKILL)


def three_steps(hook: Callable[[str], None] = _record) -> Any:
    """add_one -> double -> minus_three, each an invoked step whose result is assigned."""
    names = ("add_one", "double", "minus_three")
    fns = {"add_one": lambda x: x + 1, "double": lambda x: x * 2, "minus_three": lambda x: x - 3}
    states: dict[str, Any] = {}
    for i, name in enumerate(names):
        states[name] = {
            "invoke": {
                "id": name,
                "src": name,
                "input": lambda c, e: c["x"],
                "onDone": {"target": names[i + 1] if i < 2 else "finished", "actions": "keep"},
            }
        }
    states["finished"] = {"type": "final"}

    def actor(name: str) -> Callable[[int], int]:
        def run(x: int) -> int:
            hook(name)
            return fns[name](x)

        return run

    return create_machine(
        {
            "id": "three_steps",
            "initial": "add_one",
            "context": lambda input: {"x": input["x"]},
            "states": states,
            "output": lambda c, e: c["x"],
        },
        actors={name: actor(name) for name in names},
        actions={"keep": assign({"x": lambda c, e: e["output"]})},
    )


approval = create_machine(
    {
        "id": "approval",
        "initial": "asking",
        "context": {"by": None},
        "states": {
            "asking": {"invoke": {"id": "ask", "src": "ask", "onDone": "waiting"}},
            "waiting": {
                "on": {
                    "APPROVE": {
                        "target": "approved",
                        "actions": assign({"by": lambda c, e: e["by"]}),
                    }
                }
            },
            "approved": {"type": "final"},
        },
    },
    actors={"ask": lambda _input: "asked"},
)


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "ledger.db"
    monkeypatch.setenv(LEDGER, str(path))
    yield path


def _calls(ledger: Path) -> Counter[tuple[str, str]]:
    with sqlite3.connect(ledger) as db:
        return Counter(db.execute("SELECT step, key FROM calls").fetchall())


def test_a_run_stepped_in_the_caller_writes_what_a_worker_writes(
    store: Store, ledger: Path
) -> None:
    runtime = Runtime(store, machines=[three_steps()])
    result = Inline(runtime).run("three_steps", {"x": 5})
    assert (result.status, result.output, result.created) == ("done", 9, True)
    by_worker = runtime.start("three_steps", {"x": 5})
    Worker(runtime).run_until_idle()
    mine, theirs = runtime.get(result.run_id), runtime.get(by_worker)
    for row in (mine, theirs):  # no claim of the run (its calls ran beside it), no lease left
        assert (row.status, row.version, row.claim_count, row.lease_owner, row.wake_at) == (
            "done",
            4,
            0,
            None,
            None,
        )
    assert mine.snapshot["output"] == theirs.snapshot["output"] == 9

    def records(run_id: str) -> list[tuple[Any, ...]]:
        calls = [(c.step, c.call_id, c.status, c.attempt) for c in store.list_calls(run_id)]
        attempts = [(a.attempt, a.outcome) for a in store.call_attempts(run_id)]
        journal = [
            (j.step, j.event["type"], j.state_before, j.state_after)
            for j in store.list_events(run_id)
        ]
        return [*calls, *attempts, *journal]

    assert records(result.run_id) == records(by_worker)
    keys = [call_key(f"{result.run_id}:{step}:0") for step in (1, 2, 3)]
    assert [k for (_, k), n in _calls(ledger).items() if k in keys and n == 1] == keys  # each
    # step once, with its key


def test_a_caller_returns_when_the_run_waits_and_a_worker_takes_it_on(store: Store) -> None:
    runtime = Runtime(store, machines=[approval])
    result = Inline(runtime).run("approval")
    assert (result.status, result.snapshot.value) == ("active", "waiting")
    row = runtime.get(result.run_id)
    assert (row.lease_owner, row.wake_at, row.version) == (None, None, 2)
    runtime.send(result.run_id, {"type": "APPROVE", "by": "ann"})
    Worker(runtime).run_until_idle()
    assert runtime.get(result.run_id).snapshot["context"] == {"by": "ann"}


def test_an_existing_run_of_a_key_is_returned_not_stepped(store: Store) -> None:
    runtime = Runtime(store, machines=[approval])
    run_id = runtime.start("approval", key="k-1")
    result = Inline(runtime).run("approval", key="k-1")
    assert (result.run_id, result.created, result.snapshot.value) == (run_id, False, "asking")
    assert runtime.get(run_id).version == 1  # not stepped by the caller


def test_a_caller_that_lost_its_lease_writes_nothing(store: Store, ledger: Path) -> None:
    """The caller's first call outlives its lease: a worker takes the run over (same key) and
    finishes it; the caller's late step is refused and it reports the row as the worker left
    it. Exactly one record per step, the overlapped call run twice with one key."""
    clock = SimulatedClock(1_700_000_000_000)
    took_over: list[int] = []

    def hook(step: str) -> None:
        _record(step)
        if step == "add_one" and not took_over:
            took_over.append(1)
            clock.advance(1_000)  # past the caller's lease
            took_over.append(Worker(runtime, lease_ms=500).run_until_idle())

    runtime = Runtime(store, machines=[three_steps(hook)], clock=clock)
    result = Inline(runtime, lease_ms=500).run("three_steps", {"x": 1})
    assert took_over == [1, 3]
    assert (result.status, result.output) == ("done", 1)
    row = runtime.get(result.run_id)
    assert (row.version, row.claim_count, row.status) == (4, 0, "done")
    assert len(store.list_events(result.run_id)) == 3
    assert [(c.step, c.status, c.attempt) for c in store.list_calls(result.run_id)] == [
        (1, "done", 2),
        (2, "done", 1),
        (3, "done", 1),
    ]
    first = [a for a in store.call_attempts(result.run_id) if a.idempotency_key.endswith(":1:0")]
    assert [(a.attempt, a.outcome) for a in first] == [(1, "lost"), (2, "done")]
    calls = {k: n for (_, k), n in _calls(ledger).items()}
    assert calls == {
        call_key(f"{result.run_id}:1:0"): 2,
        call_key(f"{result.run_id}:2:0"): 1,
        call_key(f"{result.run_id}:3:0"): 1,
    }


def _store_url(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    dsn, schema = request.getfixturevalue("pg_dsn"), request.getfixturevalue("pg_schema")
    return f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"


def inline_main(url: str) -> None:
    """A caller process: one inline run of `three_steps` (its ledger says where to die)."""
    store = open_store(url)
    Inline(Runtime(store, machines=[three_steps()]), lease_ms=500).run("three_steps", {"x": 2})


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_caller_killed_mid_run_leaves_it_to_a_worker(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, ledger: Path
) -> None:
    url = _store_url(kind, tmp_path, request)
    store = open_store(url, migrate=True)
    try:
        env = {**os.environ, KILL_AT: "double"}
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from tests.persistence.test_inline import "
                "inline_main; inline_main(sys.argv[1])",
                url,
            ],
            cwd=ROOT,
            env=env,
            timeout=60,
            check=False,
        )
        assert done.returncode == -signal.SIGKILL
        runtime = Runtime(store, machines=[three_steps()])
        (run,) = runtime.list()
        assert (run.status, run.version, run.state) == ("active", 2, "double")
        held = store.list_calls(run.id)[-1]  # its call is held by the dead caller, not the run
        assert run.lease_owner is None and held.owner is not None and "/inline-" in held.owner
        time.sleep(0.6)  # the dead caller's lease runs out
        Worker(runtime).run_until_idle()
        row = runtime.get(run.id)
        assert (row.status, row.snapshot["output"], row.claim_count) == ("done", 3, 0)
        assert [
            a.outcome
            for a in store.call_attempts(run.id)
            if a.idempotency_key == held.idempotency_key
        ] == ["lost", "done"]
        calls = {k: n for (_, k), n in _calls(ledger).items()}
        assert calls == {
            call_key(f"{run.id}:1:0"): 1,
            call_key(f"{run.id}:2:0"): 2,
            call_key(f"{run.id}:3:0"): 1,
        }
    finally:
        store.close()


# -- wake-ups ------------------------------------------------------------------------------
def _serving(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, name="test-worker")
    thread.start()
    time.sleep(0.3)  # it claimed nothing and waits
    return thread


def _until(predicate: Callable[[], bool], within_s: float) -> float:
    began = time.monotonic()
    while not predicate():
        assert time.monotonic() - began < within_s, f"not within {within_s}s"
        time.sleep(0.005)
    return time.monotonic() - began


def test_an_idle_worker_wakes_for_a_start_and_an_event_not_at_its_poll(store: Store) -> None:
    runtime = Runtime(store, machines=[approval])
    worker = Worker(runtime, poll_ms=30_000)
    thread = _serving(worker)
    try:
        run_id = runtime.start("approval")
        _until(lambda: runtime.get(run_id).state == "waiting", 5.0)
        runtime.send(run_id, {"type": "APPROVE", "by": "bo"})
        _until(lambda: runtime.get(run_id).status == "done", 5.0)
    finally:
        began = time.monotonic()
        worker.stop()  # wakes the waiting thread too: no wait for the poll
        thread.join()
    assert time.monotonic() - began < 5.0
    # no claim: its call was claimed beside it, and the event named the run, which was
    # stepped without one (unleased)
    assert runtime.get(run_id).claim_count == 0


def test_a_notify_wakes_an_idle_worker_in_another_process(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    url = f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}schema={pg_schema}"
    store = open_store(url, migrate=True)
    log = tmp_path / "worker.log"
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "persistence.cli",
            "worker",
            "--store",
            url,
            "--machines",
            "tests.persistence.test_inline:approval",
            "--poll-ms",
            "60000",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )
    try:
        runtime = Runtime(store, machines=[approval])
        first = runtime.start("approval")  # taken by the worker's first claim, at its start
        _until(lambda: runtime.get(first).state == "waiting", 30.0)
        time.sleep(1.0)  # now it waits for a wake-up (its poll is a minute away)
        runtime.send(first, {"type": "APPROVE", "by": "cy"})
        _until(lambda: runtime.get(first).status == "done", 10.0)
        second = runtime.start("approval")
        _until(lambda: runtime.get(second).state == "waiting", 10.0)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
        claims = runtime.get(first).claim_count
        store.close()
    assert worker.returncode == 0, log.read_text()
    assert claims == 0  # its call was claimed beside it; the NOTIFY named the run, stepped
    # without a claim


def test_a_run_started_in_the_caller_starts_its_child_runs_for_the_workers(store: Store) -> None:
    from machines.orders import order

    runtime = Runtime(store, [order], clock=SimulatedClock(1_700_000_000_000))
    result = Inline(runtime).run("order", {"order_id": 7, "card": "ok", "amount": 30}, key="o-7")
    assert result.status == "active"  # waiting for its child run, created with it
    (payment,) = runtime.children(result.run_id)
    assert (payment.parent_run_id, payment.key) == (result.run_id, "o-7/payment")
    Worker(runtime).run_until_idle()
    done = runtime.get(result.run_id)
    assert done.status == "done" and done.snapshot["output"]["receipt"] is not None
