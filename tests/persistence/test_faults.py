"""Faults: PostgreSQL connections killed under a running worker, a full SQLite database; nothing
is lost."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import psycopg
import pytest

from persistence.runtime import Runtime
from persistence.stores import Store, StoreUnavailableError, open_store
from persistence.stores.sqlite import SQLiteStore
from persistence.worker import Worker
from tests.persistence.conftest import wait_for
from tests.persistence.faulty import poison
from tests.persistence.workflows import LEDGER_ENV, approval, init_ledger, order


def test_worker_survives_its_database_connections_being_killed(
    pg_dsn: str, pg_schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = str(tmp_path / "ledger.db")
    init_ledger(ledger)
    monkeypatch.setenv(LEDGER_ENV, ledger)
    sep = "&" if "?" in pg_dsn else "?"
    store = open_store(f"{pg_dsn}{sep}schema={pg_schema}", migrate=True)  # the observer's
    ids = [Runtime(store, [order]).start("order", {"amount": n}) for n in range(40)]
    victim_name = f"statecharts_victim_{pg_schema}"  # (this test's own, beside its copies)
    victim = open_store(f"{pg_dsn}{sep}schema={pg_schema}&application_name={victim_name}")
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
                    (victim_name,),
                ).fetchall()
                killed += len(rows)
        # A run is done when the step into its final state commits; that step's own effects
        # (the final state's entry) run after, and may be retried after a kill: wait for both.
        wait_for(lambda: store.count_runs() == {"done": 40} and settled(store, ids), timeout_s=120)
    finally:
        worker.stop()
        thread.join(timeout=30)
    assert killed >= 5, "connections must really have been killed"
    assert not thread.is_alive()
    with sqlite3.connect(ledger) as db:
        assert db.execute("SELECT count(*) FROM charges").fetchone() == (40,)
    for run_id in ids:  # its actions in the outbox, its invoked calls beside the run
        effects, calls = store.list_effects(run_id), store.list_calls(run_id)
        assert len(effects) + len(calls) == 5 and calls
        assert all(e.status == "done" for e in effects) and all(c.status == "done" for c in calls)
    store.close()
    victim.close()


def settled(store: Store, ids: list[str]) -> bool:
    """Every effect and call of these runs is done."""
    effects = [e.status for run_id in ids for e in store.list_effects(run_id)]
    calls = [c.status for run_id in ids for c in store.list_calls(run_id)]
    return all(status == "done" for status in effects + calls)


def test_a_full_sqlite_database_is_an_error_naming_it_and_loses_nothing(tmp_path: Path) -> None:
    """SQLITE_FULL (a full disk; here SQLite's own `max_page_count`, the same error code).
    Depending on the statement, SQLite undoes the statement or the whole transaction itself;
    either way the error is the store's, naming the full database, never "cannot rollback -
    no transaction is active" (issue 47 R13). Starts with an outbox effect fill it at a few
    different sizes, so both cases occur."""
    store = SQLiteStore(tmp_path / "runs.db")
    store.migrate()
    runtime = Runtime(store, [approval, poison])
    kept = [runtime.start("approval", key=f"kept-{n}") for n in range(20)]
    conn = store._conn  # max_page_count is a setting of the connection that writes
    started = 0
    for headroom in range(1, 7):
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count={pages + headroom}")
        with pytest.raises(StoreUnavailableError) as full:
            for _ in range(2000):
                runtime.start("poison", {"kind": "x" * 300}, key=f"more-{started}")
                started += 1
        message = str(full.value)
        assert message.startswith(
            "SQLite database or disk is full (SQLITE_FULL): nothing of "
            "this write was stored; free disk space"
        ), message
        assert not conn.in_transaction
        assert runtime.list(key=f"more-{started}") == []  # the failed start left nothing
        assert len(runtime.list("active", "poison", limit=10_000)) == started
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert [runtime.get(run_id).status for run_id in kept] == ["active"] * len(kept)
    conn.execute("PRAGMA max_page_count=1073741823")  # room again: the store works on
    runtime.send({"type": "APPROVE", "by": "ann"}, workflow="approval", key="kept-0")
    assert runtime.get(kept[0]).status == "done"  # (the send stepped the run at rest)
    assert runtime.get(runtime.start("approval", key="after")).status == "active"
    store.close()
