"""The run lifecycle (issue 41) on SQLite and PostgreSQL: retention (purge on demand and per
workflow, key tombstones, a purge racing a real worker process, a webhook retried after its
run was purged, never a run with a live parent or child), fork of a run whose later steps
had side effects, and reset of a failed run.
"""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import psycopg
import pytest

from persistence.cli import main as cli_main
from persistence.ingress import create_api
from persistence.lifecycle import NotRestorableError
from persistence.runtime import Runtime
from persistence.stores import RunNotFoundError, RunPurgedError, Store, open_store
from persistence.stores.codec import KeyRing
from persistence.worker import Worker
from statecharts import assign, create_machine
from statecharts.clock import SimulatedClock
from tests.persistence.conftest import Serve
from tests.persistence.retention_workflows import BUG, LEDGER, MACHINES, pack

ROOT = Path(__file__).resolve().parents[2]
HOUR = 3_600_000
OWNED = (
    "workflow_events",
    "workflow_effects",
    "workflow_inbox",
    "workflow_calls",
    "workflow_call_attempts",
    "workflow_deliveries",
    "workflow_forks",
)
"""The tables of rows a run owns (deleted with it)."""


@pytest.fixture(params=("sqlite", "postgres"))
def store_kind(request: pytest.FixtureRequest) -> str:
    """The lifecycle runs on the two durable stores."""
    return str(request.param)


@pytest.fixture
def clock() -> SimulatedClock:
    return SimulatedClock(1_800_000_000_000)


@pytest.fixture
def runtime(store: Store, clock: SimulatedClock) -> Runtime:
    LEDGER.clear()
    BUG["pack"] = False
    return Runtime(store, MACHINES, clock=clock)


def _idle(runtime: Runtime) -> None:
    Worker(runtime).run_until_idle()


def _packing(runtime: Runtime, key: str | None = None) -> str:
    """A lc_order run charged and shipped (two calls), waiting for PACK."""
    run_id = runtime.start("lc_order", key=key)
    _idle(runtime)
    assert runtime.get(run_id).state == "packing"
    return run_id


def _gone(store: Store, run_id: str) -> None:
    """Nothing of the run can be read any more."""
    with pytest.raises(RunNotFoundError):
        store.get_run(run_id)
    assert store.list_events(run_id) == [] and store.list_effects(run_id) == []
    assert store.list_calls(run_id) == [] and store.call_attempts(run_id) == []
    assert store.dead_letters(run_id) == [] and store.pending_events(run_id) == []


# -- retention ------------------------------------------------------------------------------
def test_purge_deletes_ended_runs_with_all_they_own_and_keeps_their_keys(
    runtime: Runtime, clock: SimulatedClock
) -> None:
    done = _packing(runtime, key="order-1")
    runtime.deliver(done, {"type": "PACK"}, "delivery-1")  # a webhook's delivery, recorded
    _idle(runtime)
    cancelled = _packing(runtime, key="order-2")
    runtime.store.send_event(cancelled, {"type": "NOPE"}, clock.now())
    runtime.cancel(cancelled)  # its queued event becomes a dead letter
    live = _packing(runtime, key="order-3")
    assert runtime.dead_letters(cancelled) and runtime.get(done).status == "done"
    clock.advance(2 * HOUR)
    young = _packing(runtime, key="order-4")
    runtime.send(young, "PACK")
    clock.advance(1000)

    dry = runtime.purge("1h", dry_run=True)
    assert (dry.purged, dry.dry_run) == (2, True)
    assert runtime.get(done).status == "done"  # a dry run deletes nothing
    report = runtime.purge(timedelta(hours=1))
    assert sorted(r.id for r in report.runs) == sorted([done, cancelled])
    _gone(runtime.store, done)
    _gone(runtime.store, cancelled)
    assert runtime.get(live).status == "active" and runtime.get(young).status == "done"
    # the purged runs' keys still answer "already started": no second run
    assert runtime.start("lc_order", key="order-1") == done
    with pytest.raises(RunPurgedError) as purged:
        runtime.start_run("lc_order", key="order-2")
    assert purged.value.run_id == cancelled
    with pytest.raises(RunNotFoundError, match="purged"):
        runtime.get_by_key("lc_order", "order-1")
    assert runtime.list(key="order-1") == [] and runtime.list(key="order-2") == []
    # after the key window (7 days by default) the key is free again
    clock.advance(8 * 24 * HOUR)
    assert runtime.store.expire_tombstones(clock.now()) == 2
    again = runtime.start("lc_order", key="order-1")
    assert again != done and runtime.get(again).status == "active"


def test_never_a_run_with_a_live_parent_or_a_live_child(
    runtime: Runtime, clock: SimulatedClock
) -> None:
    parent = runtime.start("lc_parent")
    (child,) = runtime.children(parent)
    runtime.send(child.id, "FINISH")  # applied at rest: the child is done, its parent not yet
    clock.advance(2 * HOUR)
    assert runtime.get(child.id).status == "done" and runtime.get(parent).status == "active"
    assert runtime.purge("1h").purged == 0  # its parent still waits for its result
    _idle(runtime)
    assert runtime.get(parent).status == "done"

    other = runtime.start("lc_parent")
    (busy,) = runtime.children(other)
    runtime.store.send_event(busy.id, {"type": "NOTHING"}, clock.now())
    held = runtime.store.claim_runs("elsewhere", clock.now(), 60_000, 10)
    assert [r.id for r in held] == [busy.id]  # a worker holds the child
    assert runtime.cancel(other) == "cancelled"  # its child's cancel is only requested
    assert runtime.get(busy.id).status == "active"
    clock.advance(2 * HOUR)
    report = runtime.purge("1h")
    assert sorted(r.id for r in report.runs) == sorted([parent, child.id])  # not `other`
    assert runtime.get(other).status == "cancelled"


def test_per_workflow_retention_applied_in_bounded_passes(
    store: Store, clock: SimulatedClock
) -> None:
    with pytest.raises(ValueError, match="not among the runtime's machines"):
        Runtime(store, MACHINES, clock=clock, retention={"no_such": "1d"})
    with pytest.raises(ValueError, match="not a duration"):
        Runtime(store, MACHINES, clock=clock, retention={"lc_quick": "soon"})
    runtime = Runtime(store, MACHINES, clock=clock, retention={"lc_quick": "1d"}, key_window="1h")
    quick = [runtime.start("lc_quick", key=f"q{i}") for i in range(5)]
    order = _packing(runtime)
    runtime.send(order, "PACK")
    _idle(runtime)
    assert runtime.apply_retention() == 0  # nothing is a day old yet
    clock.advance(25 * HOUR)
    assert runtime.retention.apply(store, clock.now(), batch=2, max_runs=2) == 2  # bounded
    assert runtime.apply_retention() == 3
    assert all(runtime.start("lc_quick", key=f"q{i}") == quick[i] for i in range(5))
    assert runtime.get(order).status == "done"  # lc_order has no retention
    clock.advance(2 * HOUR)
    runtime.apply_retention()  # expires the tombstones (the key window is an hour)
    assert runtime.start("lc_quick", key="q0") not in quick


def test_retention_named_in_the_definition(store: Store, clock: SimulatedClock) -> None:
    brief = create_machine(
        {
            "id": "lc_brief",
            "initial": "done",
            "meta": {"retention": "2h"},
            "states": {"done": {"type": "final"}},
        }
    )
    runtime = Runtime(store, [*MACHINES, brief], clock=clock)
    assert runtime.retention.periods == {"lc_brief": 2 * HOUR}
    run_id = runtime.start("lc_brief", key="b1")
    clock.advance(HOUR)
    assert runtime.apply_retention() == 0
    clock.advance(2 * HOUR)
    assert runtime.apply_retention() == 1 and runtime.start("lc_brief", key="b1") == run_id
    with pytest.raises(ValueError, match="retention of 'lc_brief'"):
        Runtime(store, [*MACHINES, brief], clock=clock, retention={"lc_brief": -5})


def _rows(url: str) -> dict[str, int]:
    """Rows per table of the database at `url`, read directly."""
    tables = ("workflow_runs", *OWNED)
    if url.startswith("sqlite"):
        with sqlite3.connect(url.split("///", 1)[1].split("?", 1)[0]) as db:
            return {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
    dsn, _, schema = url.rpartition("schema=")
    with psycopg.connect(dsn.rstrip("?&")) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        return {
            t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # type: ignore[index]
            for t in tables
        }


Spawn = Callable[[], subprocess.Popen[bytes]]


@pytest.fixture
def worker_process(crash_url: str, tmp_path: Path) -> Iterator[Spawn]:
    """Starts worker processes on the crash test's store; kills them after the test."""
    started: list[subprocess.Popen[bytes]] = []

    def spawn() -> subprocess.Popen[bytes]:
        log = (tmp_path / f"worker{len(started)}.log").open("ab")
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "persistence.cli",
                "worker",
                "--store",
                crash_url,
                "--machines",
                "tests.persistence.retention_workflows",
                "--lease-ms",
                "2000",
                "--poll-ms",
                "20",
                "--log-level",
                "WARNING",
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        started.append(worker)
        return worker

    yield spawn
    for worker in started:
        worker.kill()
        worker.wait(10)


def test_purge_racing_a_worker_process(
    crash_url: str, worker_process: Spawn, tmp_path: Path
) -> None:
    store = open_store(crash_url, migrate=True)
    try:
        runtime = Runtime(store, MACHINES)
        worker = worker_process()
        started: dict[str, str] = {}
        purged: set[str] = set()
        deadline = time.monotonic() + 120
        for wave in range(6):  # starts keep coming while the purge runs
            for i in range(10):
                key = f"w{wave}-{i}"
                started[key] = runtime.start("lc_quick", key=key)
            purged |= {r.id for r in runtime.purge("0s").runs}
        while len(purged) < len(started):
            assert time.monotonic() < deadline, f"{len(purged)}/{len(started)} purged"
            assert worker.poll() is None, (tmp_path / "worker0.log").read_text()
            purged |= {r.id for r in runtime.purge("0s").runs}
            time.sleep(0.05)
        assert purged == set(started.values())  # each once, only after it had ended
        assert worker.poll() is None  # the worker never tripped over a purged run
        assert "Traceback" not in (tmp_path / "worker0.log").read_text()
        assert _rows(crash_url) == dict.fromkeys(("workflow_runs", *OWNED), 0)
        # every key still answers with its purged run: no second run
        assert all(runtime.start("lc_quick", key=k) == v for k, v in started.items())
        assert _rows(crash_url)["workflow_runs"] == 0
    finally:
        store.close()


def test_a_worker_process_applies_its_workflows_retention(crash_url: str, tmp_path: Path) -> None:
    """`statecharts worker --retention lc_quick=1s`: the worker's own pass (at its first report,
    then every report interval) purges the runs of that workflow ended over a second ago, and
    their keys still answer; a workflow without retention keeps its runs."""
    store = open_store(crash_url, migrate=True)
    try:
        runtime = Runtime(store, MACHINES)
        quick = {f"k{i}": runtime.start("lc_quick", key=f"k{i}") for i in range(4)}
        order = _packing(runtime, key="kept")
        runtime.send(order, "PACK")
        Worker(runtime).run_until_idle()
        assert {runtime.get(r).status for r in [*quick.values(), order]} == {"done"}
        time.sleep(1.2)  # older than the retention
        log = (tmp_path / "worker.log").open("ab")
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "persistence.cli",
                "worker",
                "--store",
                crash_url,
                "--machines",
                "tests.persistence.retention_workflows",
                "--retention",
                "lc_quick=1s",
                "--poll-ms",
                "50",
                "--log-level",
                "INFO",
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            deadline = time.monotonic() + 60
            while _rows(crash_url)["workflow_runs"] > 1:
                assert worker.poll() is None, (tmp_path / "worker.log").read_text()
                assert time.monotonic() < deadline, "the worker's retention pass purged nothing"
                time.sleep(0.1)
        finally:
            worker.terminate()
            worker.wait(30)
        assert "retention purged 4 ended run(s)" in (tmp_path / "worker.log").read_text()
        assert runtime.get(order).status == "done"  # lc_order has no retention
        assert all(runtime.start("lc_quick", key=k) == v for k, v in quick.items())
    finally:
        store.close()


def test_a_webhook_retried_after_its_run_was_purged_starts_nothing(
    runtime: Runtime, clock: SimulatedClock, serve: Serve
) -> None:
    base = serve(create_api(runtime))
    body = {"key": "evt_1", "input": None}
    first = httpx.post(f"{base}/api/workflows/lc_quick/runs", json=body)
    assert first.status_code == 201
    run_id = first.json()["id"]
    _idle(runtime)
    clock.advance(HOUR)
    assert runtime.purge("30m").purged == 1
    retried = httpx.post(f"{base}/api/workflows/lc_quick/runs", json=body)
    assert retried.status_code == 200
    assert retried.json() | {"purged_at": 0} == {
        "id": run_id,
        "workflow_name": "lc_quick",
        "key": "evt_1",
        "status": "purged",
        "purged_at": 0,
    }
    assert runtime.list(name="lc_quick") == []  # no second run
    lookup = httpx.get(f"{base}/api/workflows/lc_quick/runs/evt_1")
    assert lookup.status_code == 404 and "purged" in lookup.text


# -- fork and reset -------------------------------------------------------------------------
def test_fork_of_a_run_whose_later_steps_had_side_effects(runtime: Runtime) -> None:
    original = _packing(runtime)
    assert [name for name, _ in LEDGER] == ["charge", "ship"]
    before = runtime.get(original)
    journal = runtime.store.list_events(original)
    calls = runtime.store.list_calls(original)
    shipped = next(e.step for e in journal if e.state_after == "shipping")

    fork = runtime.fork(original, shipped)  # after the charge, before the shipment
    assert fork.id != original and fork.state == "shipping" and fork.key is None
    forked = runtime.forked_from(fork.id)
    assert forked is not None and (forked.forked_from, forked.step) == (original, shipped)
    _idle(runtime)
    assert runtime.get(fork.id).state == "packing"
    # the shipment ran again, under a new key; the charge did not
    assert [name for name, _ in LEDGER] == ["charge", "ship", "ship"]
    assert LEDGER[2][1] != LEDGER[1][1]
    (fork_call,) = runtime.store.list_calls(fork.id)
    assert fork_call.idempotency_key.startswith(fork.id)
    # the original is untouched
    assert runtime.get(original) == before
    assert runtime.store.list_events(original) == journal
    assert runtime.store.list_calls(original) == calls
    runtime.send(fork.id, "PACK")
    assert runtime.get(fork.id).status == "done" and runtime.get(original).state == "packing"


def test_a_fork_does_not_inherit_the_calls_its_original_has_in_flight(runtime: Runtime) -> None:
    original = runtime.start("lc_order")
    worker = Worker(runtime)
    assert worker.run_one_call()  # the charge; its result is applied, the shipment is due
    worker.run_until_idle(calls=False)
    assert runtime.get(original).state == "shipping"
    (_, shipping) = runtime.store.list_calls(original)
    assert shipping.status == "pending"  # in flight, not run yet

    fork = runtime.fork(original, runtime.get(original).version)
    (own,) = runtime.store.list_calls(fork.id)
    assert own.idempotency_key.startswith(fork.id) and own.status == "pending"
    assert runtime.store.list_calls(original)[1] == shipping  # the original's, untouched
    worker.run_until_idle()
    assert runtime.get(fork.id).state == runtime.get(original).state == "packing"
    assert [name for name, _ in LEDGER] == ["charge", "ship", "ship"]  # one shipment each,
    assert LEDGER[1][1] != LEDGER[2][1]  # each under its own run's key


def test_fork_is_refused_clearly(runtime: Runtime, store: Store, clock: SimulatedClock) -> None:
    original = _packing(runtime)
    runtime.send(original, "PACK")
    last = runtime.get(original).version
    with pytest.raises(NotRestorableError, match="no step 99"):
        runtime.fork(original, 99)
    with pytest.raises(NotRestorableError, match="had ended"):
        runtime.fork(original, last)
    with pytest.raises(NotRestorableError, match="no snapshot at or before step 1"):
        runtime.fork(original, 1)
    elsewhere = Runtime(store, [m for m in MACHINES if m.id != "lc_order"], clock=clock)
    with pytest.raises(NotRestorableError, match="no registered definition"):
        elsewhere.fork(original, 2)
    parent = runtime.start("lc_parent")
    runtime.send(parent, "PING")
    with pytest.raises(NotRestorableError, match="waits for child run"):
        runtime.fork(parent, 2)


def test_reset_of_a_failed_run(runtime: Runtime) -> None:
    run_id = _packing(runtime)
    BUG["pack"] = True
    runtime.send(run_id, "PACK")  # (a step that would fail is left to a worker)
    _idle(runtime)
    failed = runtime.get(run_id)
    assert failed.status == "error" and "packing bug" in (failed.last_error or "")
    journal = runtime.store.list_events(run_id)
    shipped = next(e.step for e in journal if e.state_after == "shipping")
    BUG["pack"] = False  # the bug is fixed

    reset = runtime.reset(run_id, shipped)
    assert (reset.id, reset.status, reset.state) == (run_id, "active", "shipping")
    kept = runtime.store.list_events(run_id)
    assert kept[: len(journal)] == journal  # the journal is kept ...
    assert kept[-1].event == {"type": "statecharts.reset", "step": shipped}  # ... and marked
    _idle(runtime)
    assert [name for name, _ in LEDGER] == ["charge", "ship", "ship"]  # shipped again,
    assert LEDGER[2][1] != LEDGER[1][1]  # under a new key
    runtime.send(run_id, "PACK")
    assert runtime.get(run_id).status == "done"
    with pytest.raises(NotRestorableError, match="only a failed run is reset"):
        runtime.reset(run_id, shipped)


def test_cli_purge_fork_and_reset(crash_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    store = open_store(crash_url, migrate=True)
    try:
        runtime = Runtime(store, MACHINES)
        run_id = _packing(runtime, key="cli-1")
        machines = ["--machines", "tests.persistence.retention_workflows"]
        assert (
            cli_main(["runs", "fork", run_id[:8], "--step", "2", "--store", crash_url, *machines])
            == 0
        )
        out = capsys.readouterr().out
        assert f"forked from {run_id} at step 2, in state shipping" in out
        fork_id = out.split(":")[0]
        assert cli_main(["runs", "show", fork_id, "--store", crash_url]) == 0
        shown = orjson.loads(capsys.readouterr().out)
        assert (shown["forked_from"]["forked_from"], shown["forked_from"]["step"]) == (run_id, 2)
        with pytest.raises(SystemExit, match="only a failed run is reset"):
            cli_main(["runs", "reset", run_id, "--step", "2", "--store", crash_url, *machines])
        runtime.send(run_id, "PACK")
        time.sleep(0.01)  # (the end time is in ms: the purge takes runs ended before now)
        assert (
            cli_main(["runs", "purge", "--ended-before", "0s", "--dry-run", "--store", crash_url])
            == 0
        )
        assert "would purge 1 run(s)" in capsys.readouterr().out
        assert (
            cli_main(
                [
                    "runs",
                    "purge",
                    "--ended-before",
                    "0s",
                    "--workflow",
                    "lc_order",
                    "--store",
                    crash_url,
                ]
            )
            == 0
        )
        out = capsys.readouterr().out
        assert "purged 1 run(s) of lc_order" in out and "1 key(s)" in out
        with pytest.raises(SystemExit, match="not a duration"):
            cli_main(["runs", "purge", "--ended-before", "30 days", "--store", crash_url])
        assert runtime.start("lc_order", key="cli-1") == run_id
    finally:
        store.close()


def test_the_worker_refuses_a_bad_retention_in_one_line(crash_url: str) -> None:
    store = open_store(crash_url, migrate=True)
    store.close()
    worker = [
        sys.executable,
        "-m",
        "persistence.cli",
        "worker",
        "--store",
        crash_url,
        "--machines",
        "tests.persistence.retention_workflows",
    ]
    for bad, said in (
        (["--retention", "lc_quik=30d"], "not among the runtime's machines"),
        (["--retention", "lc_quick=a month"], "not a duration"),
        (["--retention", "lc_quick"], "expected WORKFLOW=AGE"),
        (["--key-window=soon"], "not a duration"),
    ):
        done = subprocess.run([*worker, *bad], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode != 0 and said in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_fork_under_encryption_keeps_the_journal_snapshots_sealed(
    crash_url: str, clock: SimulatedClock
) -> None:
    card = "SeCrEt-5500-lifecycle-marked"
    wallet = create_machine(
        {
            "id": "lc_wallet",
            "initial": "open",
            "context": lambda input: {"card": input},
            "states": {
                "open": {
                    "on": {
                        "TOP_UP": {
                            "target": "topped",
                            "actions": assign({"card": lambda c, e: c["card"] + "!"}),
                        }
                    }
                },
                "topped": {"on": {"CLOSE": "closed"}},
                "closed": {"type": "final"},
            },
        }
    )
    store = open_store(crash_url, migrate=True)
    try:
        runtime = Runtime(store, [wallet], clock=clock, codec=KeyRing([("k1", bytes(32))]))
        run_id = runtime.start("lc_wallet", card)
        runtime.send(run_id, "TOP_UP")
        fork = runtime.fork(run_id, 2)
        assert runtime.get(fork.id).snapshot["context"] == {"card": card + "!"}
        assert runtime.store.journal_snapshot(run_id, 2) is not None
        dump = _dump(crash_url)
        assert card not in dump and "workflow_events" in dump  # every table read, none clear
    finally:
        store.close()


def _dump(url: str) -> str:
    """Every row of every table of the database at `url`, as text."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.split("///", 1)[1].split("?", 1)[0]) as db:
            tables = [
                r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            ]
            return "\n".join(
                f"{t} {row!r}" for t in tables for row in db.execute(f'SELECT * FROM "{t}"')
            )
    dsn, _, schema = url.rpartition("schema=")
    with psycopg.connect(dsn.rstrip("?&")) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            )
        ]
        return "\n".join(
            f"{t} {row[0]}"
            for t in tables
            for row in conn.execute(f'SELECT t::text FROM "{schema}"."{t}" AS t')
        )


def test_a_fork_and_a_reset_carry_the_search_attributes_of_their_step(
    runtime: Runtime, store: Store, clock: SimulatedClock
) -> None:
    tiers = create_machine(
        {
            "id": "lc_tiers",
            "initial": "basic",
            "meta": {"search": ["tier"]},
            "context": {"tier": "basic"},
            "states": {
                "basic": {"on": {"UP": {"target": "gold", "actions": assign({"tier": "gold"})}}},
                "gold": {"on": {"BREAK": {"actions": assign(pack)}}},
            },
        }
    )
    runtime = Runtime(store, [tiers], clock=clock)
    run_id = runtime.start("lc_tiers")
    runtime.send(run_id, "UP")
    fork = runtime.fork(run_id, 2)
    assert {r.id for r in runtime.list(search={"tier": "gold"})} == {fork.id, run_id}
    BUG["pack"] = True
    runtime.send(run_id, "BREAK")
    _idle(runtime)
    assert runtime.get(run_id).status == "error"
    runtime.reset(run_id, 2)  # (gold, as at step 2: the tier is as the snapshot says)
    assert {r.id for r in runtime.list(search={"tier": "gold"})} == {fork.id, run_id}


@contextmanager
def _a_conflict_in(
    store: Store, monkeypatch: pytest.MonkeyPatch, method: str, n: int
) -> Iterator[None]:
    """The `n`-th statement of the store's `method` fails as PostgreSQL fails a deadlock's
    victim (SQLSTATE 40P01, mapped as the store maps it): its transaction rolled back, once."""
    from persistence.stores import StoreUnavailableError

    execute, call, seen = store._exec, getattr(store, method), [-1]  # type: ignore[attr-defined]

    def conflicting(*args: Any) -> Any:
        if seen[0] >= 0:  # inside `method`
            seen[0] += 1
            if seen[0] == n:
                try:
                    raise psycopg.errors.DeadlockDetected("deadlock detected")
                except psycopg.Error as exc:
                    raise StoreUnavailableError(f"PostgreSQL unavailable: {exc}") from exc
        return execute(*args)

    def counted(*args: Any, **kwargs: Any) -> Any:
        seen[0] = 0
        return call(*args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(store, "_exec", conflicting)
        patched.setattr(store, method, counted)
        yield
    assert seen[0] > n, f"{method}: its conflict not met"  # (met, then run again)


def test_a_purge_fork_reset_and_key_expiry_picked_as_deadlock_victims_are_run_again(
    runtime: Runtime,
    store: Store,
    clock: SimulatedClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 47: every store call that writes is run again when the database rolls it back
    to resolve a conflict, the operator's lifecycle writes too (a purge meeting a worker, a
    fork or reset meeting a step): each written once, as without the conflict, not raised."""
    caplog.set_level(logging.WARNING, "statecharts.store")
    original = _packing(runtime, key="order-1")
    with _a_conflict_in(store, monkeypatch, "fork_run", 2):
        fork = runtime.fork(original, runtime.get(original).version)
    assert sorted(r.id for r in runtime.list(name="lc_order")) == sorted([original, fork.id])
    assert runtime.forked_from(fork.id) is not None
    BUG["pack"] = True
    runtime.send(original, "PACK")
    _idle(runtime)
    assert runtime.get(original).status == "error"
    BUG["pack"] = False
    shipped = next(e.step for e in store.list_events(original) if e.state_after == "shipping")
    with _a_conflict_in(store, monkeypatch, "reset_run", 2):
        reset = runtime.reset(original, shipped)
    assert (reset.status, reset.state) == ("active", "shipping")
    resets = [e for e in store.list_events(original) if e.event.get("type") == "statecharts.reset"]
    assert len(resets) == 1
    _idle(runtime)
    runtime.send(original, "PACK")
    runtime.cancel(fork.id)
    clock.advance(2 * HOUR)
    with _a_conflict_in(store, monkeypatch, "purge_runs", 2):
        report = runtime.purge("1h")
    assert sorted(r.id for r in report.runs) == sorted([original, fork.id])
    _gone(store, original)
    clock.advance(8 * 24 * HOUR)
    with _a_conflict_in(store, monkeypatch, "expire_tombstones", 1):
        assert store.expire_tombstones(clock.now()) == 1
    assert runtime.start("lc_order", key="order-1") != original
    assert caplog.text.count("SQLSTATE 40P01") == 4
