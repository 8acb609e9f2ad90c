"""Issue 47's R9: leases and timers are measured by the store's clock (the database server's on
PostgreSQL, one monotonic clock per machine on SQLite), not by each worker's wall clock. A
worker whose wall clock reads an hour behind (its `time.time` stepped back, as a clock set back
an hour would; the kernel's monotonic clock untouched) takes a SIGKILLed worker's runs and
calls over within a lease, and fires timers written before the step on time; on SQLite and
PostgreSQL, with real worker subprocesses."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from persistence.runtime import Runtime
from persistence.stores import Store, open_store
from persistence.stores.clocks import FOLLOW_MS
from persistence.stores.sqlite import SQLiteStore
from tests.persistence import call_workflows
from tests.persistence.conftest import handles_sigterm, stop_workers, wait_for
from tests.persistence.workflows import LEDGER_ENV, SLOW_ENV, init_ledger, order

ROOT = Path(__file__).resolve().parents[2]
HOUR_S = 3600
LEASE_MS = 1500
STEPPED_BACK = (
    "import runpy, sys, time\n"
    "wall, wall_ns = time.time, time.time_ns\n"
    f"time.time = lambda: wall() - {HOUR_S}\n"
    f"time.time_ns = lambda: wall_ns() - {HOUR_S} * 10**9\n"
    "runpy.run_module('persistence.cli', run_name='__main__')\n"
)
"""A worker whose wall clock reads an hour behind (what a clock set back an hour reads)."""


class Fleet:
    """Worker subprocesses on one store, writing one ledger."""

    def __init__(self, url: str, tmp_path: Path, machines: str) -> None:
        self.url, self.tmp_path, self.machines = url, tmp_path, machines
        self.ledger = str(tmp_path / "ledger.db")
        self.workers: list[subprocess.Popen[bytes]] = []

    def spawn(self, *, stepped_back: bool = False, effect_ms: int = 0) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            LEDGER_ENV: self.ledger,
            call_workflows.LEDGER_ENV: self.ledger,
            SLOW_ENV: str(effect_ms),
            "PYTHONPATH": str(ROOT),
        }
        start = ["-c", STEPPED_BACK] if stepped_back else ["-m", "persistence.cli"]
        log = (self.tmp_path / f"worker{len(self.workers)}.log").open("ab")
        worker = subprocess.Popen(
            [
                sys.executable,
                *start,
                "worker",
                "--store",
                self.url,
                "--machines",
                self.machines,
                "--lease-ms",
                str(LEASE_MS),
                "--poll-ms",
                "50",
                "--log-level",
                "WARNING",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        self.workers.append(worker)
        return worker

    def calls(self) -> list[tuple[str, str, int, float, bool]]:
        """(name, key, pid, started by the caller's wall clock, ended) of every call."""
        with sqlite3.connect(self.ledger, timeout=60) as db:
            return [
                (n, k, p, s, e is not None)
                for n, k, p, s, e in db.execute(
                    "SELECT name, key, pid, started, ended FROM calls ORDER BY rowid"
                )
            ]


@pytest.fixture
def fleet_of(crash_url: str, tmp_path: Path) -> Iterator[Callable[[str], Fleet]]:
    fleets: list[Fleet] = []

    def make(machines: str) -> Fleet:
        fleets.append(Fleet(crash_url, tmp_path, machines))
        return fleets[-1]

    yield make
    for fleet in fleets:
        stop_workers(fleet.workers)


def _kill(worker: subprocess.Popen[bytes]) -> None:
    worker.send_signal(signal.SIGKILL)
    worker.wait(10)


@pytest.mark.parametrize("killed_in", ["charge", "notify"])
def test_r9_a_worker_whose_clock_stepped_back_an_hour_takes_a_killed_workers_runs_over(
    crash_url: str, fleet_of: Callable[[str], Fleet], killed_in: str
) -> None:
    """Killed in `charge` (an invoked call: its lease is the call's) or in `notify` (an entry
    action: run under the run's lease), its runs are finished by the stepped-back worker, each
    call cut short made again with its idempotency key, each run charged once."""
    fleet = fleet_of("tests.persistence.workflows")
    init_ledger(fleet.ledger)
    store = open_store(crash_url, migrate=True)
    try:
        runtime = Runtime(store, [order])
        runs = [runtime.start("order", {"amount": n}) for n in (1, 2)]
        first = fleet.spawn(effect_ms=2_000)  # each side effect takes 2 s

        def cut_short() -> list[str]:  # the keys of the first worker's calls it has not ended
            return [
                key
                for name, key, pid, _, ended in fleet.calls()
                if name == killed_in and pid == first.pid and not ended
            ]

        wait_for(lambda: bool(cut_short()), 60)
        _kill(first)
        second = fleet.spawn(stepped_back=True)
        # an hour behind, a lease of the killed worker would look 3,600 s long: it is 1.5 s
        wait_for(lambda: all(store.get_run(r).status == "done" for r in runs), 60)
        calls = fleet.calls()
        again = {key for name, key, pid, _, _ in calls if pid == second.pid and name == killed_in}
        assert set(cut_short()) <= again  # each call cut short made again, with its key
        assert {pid for name, _, pid, _, _ in calls if name == "ship"} == {second.pid}
        # the second worker's wall clock really was an hour behind the first's
        started = {pid: when for _, _, pid, when, _ in calls}
        assert started[first.pid] - started[second.pid] > HOUR_S - 120
        with sqlite3.connect(fleet.ledger) as db:  # charged once per run, whoever called
            assert db.execute("SELECT count(*) FROM charges").fetchone()[0] == 2
    finally:
        store.close()


def test_r9_a_timer_written_before_the_clock_stepped_back_fires_on_time(
    crash_url: str, fleet_of: Callable[[str], Fleet]
) -> None:
    """The payment's 1.2 s reminder, written at its start, fires while the stepped-back worker
    makes the call again (killed during the call's first attempt). The run starts once the
    first worker serves: under load a worker's start alone took more than 1.2 s, and the
    reminder fired before the kill."""
    fleet = fleet_of("tests.persistence.call_workflows")
    call_workflows.init_ledger(fleet.ledger)
    store = open_store(crash_url, migrate=True)
    try:
        runtime = Runtime(store, call_workflows.MACHINES)
        first = fleet.spawn()
        wait_for(lambda: handles_sigterm(first.pid) is not False, 60)  # (it serves)
        run_id = runtime.start("payment")
        wait_for(lambda: len(call_workflows.ledger(fleet.ledger)) == 1, 60)
        _kill(first)
        assert store.get_run(run_id).snapshot["context"]["reminded"] is False
        second = fleet.spawn(stepped_back=True)
        wait_for(lambda: store.get_run(run_id).status == "done", 60)
        run = store.get_run(run_id)
        assert run.snapshot["context"] == {"pings": 0, "reminded": True, "receipt": "paid"}
        # (the ledger's order is by wall clock: the second worker's reads an hour behind)
        assert sorted(pid for _, _, pid, _ in call_workflows.ledger(fleet.ledger)) == sorted(
            [first.pid, second.pid]
        )
        assert [(a.attempt, a.outcome) for a in store.call_attempts(run_id)] == [
            (1, "lost"),
            (2, "done"),
        ]
    finally:
        store.close()


def test_r9_every_process_on_the_machine_reads_one_sqlite_clock_that_never_steps_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's clock: the anchor kept in the database is what a store opened later reads,
    whatever the wall clock says then; a step forward of the wall clock is followed (and kept
    for stores opened later), a step back never."""
    path = tmp_path / "runs.db"
    first = SQLiteStore(path)
    first.migrate()
    before = first.clock().now()
    wall_ns = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: wall_ns() - HOUR_S * 10**9)
    later = SQLiteStore(path)  # another store object: a process started after the step back
    assert 0 <= later.clock().now() - before < 60_000
    assert first.clock() is first.clock()
    monkeypatch.setattr(time, "time_ns", lambda: wall_ns() + HOUR_S * 10**9)
    ahead = first.clock().now()
    assert ahead - before > HOUR_S * 1000 - FOLLOW_MS
    monkeypatch.setattr(time, "time_ns", wall_ns)  # back again: not followed
    assert first.clock().now() >= ahead
    assert SQLiteStore(path).clock().now() >= ahead  # kept: read by a store opened now
    for store in (first, later):
        store.close()


def test_r9_a_runtime_measures_by_its_stores_clock_unless_given_one(store: Store) -> None:
    runtime = Runtime(store, [order])
    assert runtime.clock is store.clock()
    run_id = runtime.start("order")
    assert abs(store.get_run(run_id).created_at - store.clock().now()) < 60_000
