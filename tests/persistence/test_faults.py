"""Faults: PostgreSQL connections killed under a running worker; nothing is lost."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import psycopg
import pytest

from persistence.runtime import Runtime
from persistence.stores import open_store
from persistence.worker import Worker
from tests.persistence.conftest import wait_for
from tests.persistence.workflows import LEDGER_ENV, init_ledger, order

APP = "statecharts_fault_victim"


def test_worker_survives_its_database_connections_being_killed(
    pg_dsn: str, pg_schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = str(tmp_path / "ledger.db")
    init_ledger(ledger)
    monkeypatch.setenv(LEDGER_ENV, ledger)
    sep = "&" if "?" in pg_dsn else "?"
    store = open_store(f"{pg_dsn}{sep}schema={pg_schema}", migrate=True)  # the observer's
    ids = [Runtime(store, [order]).start("order", {"amount": n}) for n in range(40)]
    victim = open_store(f"{pg_dsn}{sep}schema={pg_schema}&application_name={APP}")
    worker = Worker(Runtime(victim, [order]), concurrency=2, lease_ms=1000, poll_ms=20)
    thread = threading.Thread(target=worker.run)
    killed = 0
    thread.start()
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            for _ in range(15):  # the database "goes away" under the worker, repeatedly
                time.sleep(0.15)
                rows = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = %s",
                    (APP,),
                ).fetchall()
                killed += len(rows)
        wait_for(lambda: store.count_runs() == {"done": 40}, timeout_s=120)
    finally:
        worker.stop()
        thread.join(timeout=30)
    assert killed >= 5, "connections must really have been killed"
    assert not thread.is_alive()
    with sqlite3.connect(ledger) as db:
        assert db.execute("SELECT count(*) FROM charges").fetchone() == (40,)
    for run_id in ids:
        effects = store.list_effects(run_id)
        assert len(effects) == 5 and all(e.status == "done" for e in effects)
    store.close()
    victim.close()
