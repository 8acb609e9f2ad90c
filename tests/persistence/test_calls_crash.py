"""Calls beside their run under real faults (issue 40): worker subprocesses SIGKILLed during a
call, a call that hangs, a cancel from the command line during a call; SQLite and PostgreSQL.

The ledger (`tests.persistence.call_workflows`) records each call as the outside world saw it:
its idempotency key, its process and how it ended.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from persistence.runtime import Runtime
from persistence.stores import Store, open_store
from tests.persistence.call_workflows import CALL_S, LEDGER_ENV, MACHINES, init_ledger, ledger

ROOT = Path(__file__).resolve().parents[2]


def _until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


class Fleet:
    """Worker subprocesses on one store, with the ledger in their environment."""

    def __init__(self, url: str, tmp_path: Path) -> None:
        self.url, self.tmp_path = url, tmp_path
        self.ledger = str(tmp_path / "ledger.db")
        init_ledger(self.ledger)
        self.env = {**os.environ, LEDGER_ENV: self.ledger}
        self.workers: list[subprocess.Popen[bytes]] = []

    def spawn(self) -> subprocess.Popen[bytes]:
        log = (self.tmp_path / f"worker{len(self.workers)}.log").open("ab")
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "persistence.cli",
                "worker",
                "--store",
                self.url,
                "--machines",
                "tests.persistence.call_workflows",
                "--lease-ms",
                "1000",
                "--poll-ms",
                "50",
                "--log-level",
                "WARNING",
            ],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        self.workers.append(worker)
        return worker

    def kill_all(self) -> None:
        for worker in self.workers:
            worker.kill()
            worker.wait(10)


@pytest.fixture
def fleet(crash_url: str, tmp_path: Path) -> Iterator[tuple[Fleet, Store, Runtime]]:
    store = open_store(crash_url, migrate=True)
    fleet = Fleet(crash_url, tmp_path)
    try:
        yield fleet, store, Runtime(store, MACHINES)
    finally:
        fleet.kill_all()
        store.close()


def test_sigkill_during_a_call_retries_it_with_its_key_while_timers_and_events_go_on(
    fleet: tuple[Fleet, Store, Runtime],
) -> None:
    workers, store, runtime = fleet
    first = workers.spawn()
    run_id = runtime.start("payment")
    _until(lambda: len(ledger(workers.ledger)) == 1, 30, "the call to start")
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    for _ in range(3):  # the run is not held by the dead worker: applied at once, here
        runtime.send(run_id, "PING")
    assert store.get_run(run_id).snapshot["context"]["pings"] == 3
    second = workers.spawn()
    _until(lambda: store.get_run(run_id).status != "active", 30 + CALL_S, "the run to end")

    run = store.get_run(run_id)
    assert run.status == "done"
    assert run.snapshot["context"] == {"pings": 3, "reminded": True, "receipt": "paid"}
    calls = ledger(workers.ledger)
    assert [(name, how) for name, _, _, how in calls] == [
        ("slow_charge", None),
        ("slow_charge", "ended"),
    ]
    assert calls[0][1] == calls[1][1]  # one idempotency key for both attempts
    assert (calls[0][2], calls[1][2]) == (first.pid, second.pid)
    assert [(a.attempt, a.outcome) for a in store.call_attempts(run_id)] == [
        (1, "lost"),
        (2, "done"),
    ]
    journal = [e.event["type"] for e in store.list_events(run_id)]
    reminder = next(i for i, t in enumerate(journal) if t.startswith("xstate.after"))
    assert reminder < journal.index(next(t for t in journal if t.startswith("xstate.done.actor")))
    assert store.dead_letters(run_id) == []


def test_a_hung_call_is_timed_out_and_attempted_again_with_its_key(
    fleet: tuple[Fleet, Store, Runtime],
) -> None:
    workers, store, runtime = fleet
    workers.spawn()
    run_id = runtime.start("hung_payment")
    _until(lambda: store.get_run(run_id).status != "active", 30, "the run to end")
    run = store.get_run(run_id)
    assert (run.status, run.snapshot["context"]["receipt"]) == ("done", "paid")
    calls = ledger(workers.ledger)
    assert [(name, how) for name, _, _, how in calls] == [
        ("hanging_charge", None),
        ("hanging_charge", "ended"),
    ]
    assert calls[0][1] == calls[1][1]  # the retried call site keeps its key
    outcomes = [(a.outcome, a.error_name) for a in store.call_attempts(run_id)]
    assert outcomes == [("timed_out", "CallTimeoutError"), ("done", None)]


def test_a_cancel_from_the_command_line_during_a_call_wins_at_once(
    fleet: tuple[Fleet, Store, Runtime],
) -> None:
    workers, store, runtime = fleet
    workers.spawn()
    run_id = runtime.start("long_payment")
    _until(lambda: len(ledger(workers.ledger)) == 1, 30, "the call to start")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "persistence.cli",
            "runs",
            "cancel",
            run_id,
            "--store",
            workers.url,
            "--reason",
            "customer asked",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "cancelled" in done.stdout
    assert store.get_run(run_id).status == "cancelled"  # not after the call's 30 s
    _until(lambda: ledger(workers.ledger)[0][3] == "stopped", 10, "the call to be told")
    assert [a.outcome for a in store.call_attempts(run_id)] == ["stopped"]
    assert store.dead_letters(run_id) == []
