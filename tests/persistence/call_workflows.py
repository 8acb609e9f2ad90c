"""Workflows with calls that take real time, importable by worker subprocesses
(`--machines tests.persistence.call_workflows`) for the calls-beside-their-run crash tests.

Each call writes its start, its key, its process and how it ended to a ledger (an SQLite file
named by STATECHARTS_TEST_LEDGER), so a test sees from outside what really ran.
"""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any

from persistence.outbox import heartbeat
from statecharts import assign, create_machine

LEDGER_ENV = "STATECHARTS_TEST_LEDGER"
CALL_S = 2.0
"""How long `slow_charge` takes: long beside the lease, timers and events of these tests."""


def init_ledger(path: str) -> None:
    """Create the ledger table."""
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(
            "CREATE TABLE IF NOT EXISTS calls (name text, key text, pid integer, "
            "started real, ended real, how text)"
        )


def ledger(path: str) -> list[tuple[str, str, int, str | None]]:
    """(name, key, pid, how it ended) of every call, in start order."""
    with sqlite3.connect(path, timeout=60) as db:
        return db.execute("SELECT name, key, pid, how FROM calls ORDER BY started").fetchall()


def _record(name: str, key: str, work: Any) -> Any:
    db = sqlite3.connect(os.environ[LEDGER_ENV], timeout=60, isolation_level=None)
    try:
        row = db.execute(
            "INSERT INTO calls (name, key, pid, started) VALUES (?, ?, ?, ?)",
            (name, key, os.getpid(), time.time()),
        ).lastrowid
        result, how = work()
        db.execute("UPDATE calls SET ended = ?, how = ? WHERE rowid = ?", (time.time(), how, row))
        return result
    finally:
        db.close()


def _slow(seconds: float) -> tuple[str, str]:
    """Work for `seconds`, heartbeating; stop early when told the call was stopped."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not heartbeat():
            return "late", "stopped"
        time.sleep(0.02)
    return "paid", "ended"


def slow_charge(_input: Any, idempotency_key: str) -> str:
    """A payment that takes `CALL_S` seconds."""
    return _record("slow_charge", idempotency_key, lambda: _slow(CALL_S))  # type: ignore[no-any-return]


def long_charge(_input: Any, idempotency_key: str) -> str:
    """A payment that takes 30 s unless it is stopped first (it heartbeats)."""
    return _record("long_charge", idempotency_key, lambda: _slow(30))  # type: ignore[no-any-return]


def hanging_charge(_input: Any, idempotency_key: str) -> str:
    """Hangs (30 s, ignoring every stop) on its first attempt; answers at once after."""
    first = not any(name == "hanging_charge" for name, *_ in ledger(os.environ[LEDGER_ENV]))

    def work() -> tuple[str, str]:
        if first:
            time.sleep(30)
            return "late", "hung"
        return "paid", "ended"

    return _record("hanging_charge", idempotency_key, work)  # type: ignore[no-any-return]


payment = create_machine(
    {
        "id": "payment",
        "initial": "calling",
        "context": {"pings": 0, "reminded": False, "receipt": None},
        "states": {
            "calling": {
                "invoke": {
                    "src": "slow_charge",
                    "onDone": {
                        "target": "paid",
                        "actions": assign({"receipt": lambda c, e: e["output"]}),
                    },
                },
                "after": {"1200": {"actions": assign({"reminded": True})}},
                "on": {"PING": {"actions": assign({"pings": lambda c, e: c["pings"] + 1})}},
            },
            "paid": {"type": "final"},
        },
    },
    actors={"slow_charge": slow_charge},
)
"""A slow charge while a reminder timer fires and events arrive (none leaves the state)."""

hung_payment = create_machine(
    {
        "id": "hung_payment",
        "initial": "calling",
        "context": {"receipt": None},
        "states": {
            "calling": {
                "invoke": {
                    "src": "hanging_charge",
                    "timeout": 700,
                    "retry": {"max_attempts": 3, "initial_interval": 100},
                    "onDone": {
                        "target": "paid",
                        "actions": assign({"receipt": lambda c, e: e["output"]}),
                    },
                    "onError": "failed",
                }
            },
            "paid": {"type": "final"},
            "failed": {"type": "final"},
        },
    },
    actors={"hanging_charge": hanging_charge},
)
"""A charge whose first attempt hangs: timed out after 0.7 s, attempted again (same key)."""

long_payment = create_machine(
    {
        "id": "long_payment",
        "initial": "calling",
        "states": {
            "calling": {"invoke": {"src": "long_charge", "onDone": "paid"}},
            "paid": {"type": "final"},
        },
    },
    actors={"long_charge": long_charge},
)
"""A charge that runs until it is stopped (30 s at most)."""

MACHINES = [payment, hung_payment, long_payment]
