"""A worker SIGKILLed while a run waits to retry: after a restart the retry happens at its
original due time, with the same idempotency key (issue 5)."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from persistence.runtime import Runtime
from persistence.stores import open_store
from tests.persistence.workflows import LEDGER_ENV, RETRY_WAIT_MS, init_ledger, retrying

ROOT = Path(__file__).resolve().parents[2]


def _worker(url: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "persistence.cli",
            "worker",
            "--store",
            url,
            "--machines",
            "tests.persistence.workflows",
            "--lease-ms",
            "1000",
            "--poll-ms",
            "20",
            "--log-level",
            "WARNING",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
    )


def _wait(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_sigkill_while_waiting_to_retry_keeps_due_time_and_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    ledger = str(tmp_path / "ledger.db")
    init_ledger(ledger)
    env = {**__import__("os").environ, LEDGER_ENV: ledger}
    store = open_store(url, migrate=True)
    runtime = Runtime(store, [retrying])
    run_id = runtime.start("retrying")

    first = _worker(url, env, tmp_path / "worker1.log")
    try:
        _wait(
            lambda: store.get_run(run_id).state == "charging.waiting_to_retry",
            30,
            "the first attempt to fail",
        )
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.kill()
    run = store.get_run(run_id)
    due_at = run.snapshot["timers"][0]["due_at"]
    assert run.wake_at == due_at
    time.sleep(1.0)  # the worker stays dead for a third of the wait

    second = _worker(url, env, tmp_path / "worker2.log")
    try:
        _wait(lambda: store.get_run(run_id).status == "done", 30, "the run to finish")
    finally:
        second.terminate()
        second.wait(10)

    with sqlite3.connect(ledger) as db:
        calls = db.execute("SELECT name, key, started FROM calls ORDER BY started").fetchall()
        charges = db.execute("SELECT key FROM charges").fetchall()
    assert [name for name, _, _ in calls] == ["flaky_charge", "charge"]
    assert calls[0][1] == calls[1][1], "the retry keeps the call's idempotency key"
    assert charges == [(calls[0][1],)]
    retried_at_ms = calls[1][2] * 1000
    # at its original due time: not before it, and not a whole wait after the restart
    assert due_at <= retried_at_ms < due_at + RETRY_WAIT_MS / 2
    assert store.get_run(run_id).snapshot["context"] == {"receipt": calls[0][1]}
