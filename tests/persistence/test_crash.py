"""Crash test: real worker processes SIGKILLed at random moments while runs proceed.

Default: 150 runs of the four-effect `order` workflow; STATECHARTS_SOAK=1 runs 1,000 (and
STATECHARTS_CRASH_RUNS=N any count). Afterwards every run must be done, every outbox key recorded
once, every charge made once (the payments API dedups on the idempotency key), no effect executed
with a key the database does not know (which a double step would produce), and no two processes
inside one run's effects at the same time. PostgreSQL is tried directly and through a real
PgBouncer in transaction mode (the workers' wake-ups on a direct `listen_dsn`) and in session
mode (their `LISTEN` through the pooler).
"""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from persistence.runtime import Runtime
from persistence.stores import Store, open_store
from persistence.stores.rules import call_key
from tests.persistence.conftest import (
    CITUS_KINDS,
    POOLED_KINDS,
    kill_and_replace,
    stop_workers,
    store_url,
)
from tests.persistence.workflows import LEDGER_ENV, SLOW_ENV, init_ledger, order

ROOT = Path(__file__).resolve().parents[2]
SOAK = os.environ.get("STATECHARTS_SOAK", "") not in ("", "0")
RUNS = int(os.environ.get("STATECHARTS_CRASH_RUNS", "1000" if SOAK else "150"))
WORKERS = 3
THREADS = 2
BATCH = 4  # runs each thread steps together (one commit per round)
LEASE_MS = 1500
POOLED_LEASE_MS = 3000
"""Behind PgBouncer (8 server connections for the three workers' pools), a heartbeat can wait
for a server connection behind other transactions: on a loaded machine longer than 1.5 s
leases allow, and another worker then ran a call still running (docs/persistence.md,
'Connection poolers': size the pooler's pool so that leases outlast its queue)."""
LEASE_MS_CITUS = 5000  # (each statement crosses the coordinator and a worker node: on two
# cores shared by three servers and the workers, a renewal can take longer than a third of
# 1.5 s, and a lease that runs out under a live holder lets a second process in)
DEADLINE_S = 900 if SOAK else 240


@pytest.fixture(params=["sqlite", "postgres", *POOLED_KINDS, *CITUS_KINDS])
def crash_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """`conftest.crash_url`, and PostgreSQL behind PgBouncer in both pool modes."""
    url = store_url(request.param, request, tmp_path)
    if request.param == "pgbouncer-transaction":
        url += "&listen_dsn=" + quote(request.getfixturevalue("pg_dsn"), safe="")
    return url


def _lease_ms(url: str) -> int:
    if url.startswith("citus"):
        return LEASE_MS_CITUS
    return POOLED_LEASE_MS if "pooler=" in url else LEASE_MS


def _spawn(url: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
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
            "--concurrency",
            str(THREADS),
            "--batch",
            str(BATCH),
            "--lease-ms",
            str(_lease_ms(url)),
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


def _all_done(store: Store, ids: list[str]) -> bool:
    """No run active and no effect pending: a run's last step commits it `done` with its last
    effects still to run under the lease, and a worker killed there leaves them to whoever
    takes the lease over when it expires."""
    if store.count_runs().get("active", 0):
        return False
    return not any(w.effects for w in store.pending_work(ids).values())


def test_sigkilled_workers_lose_nothing_and_never_double_step(
    crash_url: str, tmp_path: Path
) -> None:
    rng = random.Random(int(os.environ.get("STATECHARTS_CRASH_SEED", "4")))
    ledger_path = str(tmp_path / "ledger.db")
    init_ledger(ledger_path)
    env = {**os.environ, LEDGER_ENV: ledger_path, SLOW_ENV: "15", "PYTHONPATH": str(ROOT)}
    store = open_store(crash_url, migrate=True)
    runtime = Runtime(store, [order])
    ids = [runtime.start("order", {"amount": n}) for n in range(RUNS)]

    log = tmp_path / "workers.log"
    workers = [_spawn(crash_url, env, log) for _ in range(WORKERS)]
    kills, started = 0, time.monotonic()
    try:
        # Kill a random worker every 0.15-0.5 s while work remains (at most 12 kills), replacing
        # it at once; then let the survivors finish.
        while not _all_done(store, ids) and time.monotonic() - started < DEADLINE_S:
            time.sleep(rng.uniform(0.15, 0.5))
            if kills < 12 and not _all_done(store, ids):
                kill_and_replace(
                    workers, rng.randrange(len(workers)), lambda: _spawn(crash_url, env, log)
                )
                kills += 1
        assert _all_done(store, ids), f"work left after {DEADLINE_S}s: {store.count_runs()}"
    finally:
        stop_workers(workers)
    assert kills >= 3, "the test must actually kill workers"
    assert all(w.returncode == 0 for w in workers), log.read_text()[-3000:]
    _check(store, ids, ledger_path, kills)
    store.close()


def _check(store: Store, ids: list[str], ledger_path: str, kills: int) -> None:
    runs = [store.get_run(i) for i in ids]
    assert store.count_runs() == {"done": len(ids)}, "every run done, none lost or failed"
    for r in runs:
        assert (r.state, r.lease_owner) == ("shipped", None), f"run {r.id}: {r}"

    db_keys: dict[str, str] = {}
    called_keys: set[str] = set()  # keys of effects that call user code (all but emit)
    charge_keys: set[str] = set()  # the first call of each run: its charge
    for r in runs:  # its actions in the outbox, its invoked calls beside it, in step order
        effects: list[Any] = sorted(
            [*store.list_effects(r.id), *store.list_calls(r.id)],
            key=lambda e: _step_of(e.idempotency_key),
        )
        kinds = [
            (getattr(e, "kind", "call"), e.payload.get("id") or e.payload.get("type"))
            for e in effects
        ]
        assert kinds == [
            ("call", "charge"),
            ("call", "reserve"),
            ("action", "notify"),
            ("call", "ship"),
            ("emit", None),
        ], f"run {r.id} effects {kinds}"
        assert all(e.status == "done" for e in effects), f"run {r.id}: {effects}"
        for e in effects:
            key = call_key(e.idempotency_key)  # the key user code is given for the record
            assert key not in db_keys  # recorded exactly once
            db_keys[key] = r.id
            if getattr(e, "kind", "call") != "emit":
                called_keys.add(key)
            if e.idempotency_key.endswith(":1:0"):
                charge_keys.add(key)
        assert r.snapshot["context"]["receipt"] == call_key(effects[0].idempotency_key)

    with sqlite3.connect(ledger_path) as ledger:
        charges = dict(ledger.execute("SELECT key, amount FROM charges").fetchall())
        calls = ledger.execute("SELECT name, key, pid, started, ended FROM calls").fetchall()
    assert set(charges) == charge_keys, "one charge per run, under its recorded key"

    per_key: dict[str, int] = defaultdict(int)
    for _, key, *_ in calls:
        assert key in db_keys, f"effect executed with key {key} the database never recorded"
        per_key[key] += 1
    assert set(per_key) == called_keys, "every recorded effect ran"
    repeats = sum(n - 1 for n in per_key.values())
    # a killed worker had in flight at most one uncommitted round (one step's action effect
    # for each run of each thread's batch) and the calls its executor's threads were running
    # (32 by default, `Worker.call_threads`; each run has one call at a time)
    in_flight = THREADS * BATCH + 32
    assert repeats <= kills * in_flight, "repeats only for effects in flight when a worker died"

    by_run: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for _, key, pid, began, ended in calls:
        if ended is not None:
            by_run[db_keys[key]].append((began, ended, pid))
    overlapping = [
        run_id
        for run_id, spans in by_run.items()
        for (a0, a1, p), (b0, b1, q) in _pairs(sorted(spans))
        if p != q and b0 < a1
    ]
    assert overlapping == [], "two processes inside one run's effects at once"
    print(f"\ncrash test: {len(ids)} runs, {kills} kills, {repeats} effect calls repeated")


def _step_of(key: str) -> tuple[int, int]:
    """(step, index) of an idempotency key `<run id>:<step>:<index>`."""
    step, index = key.rsplit(":", 2)[1:]
    return int(step), int(index)


def _pairs(items: list[Any]) -> list[tuple[Any, Any]]:
    return [(items[i], items[j]) for i in range(len(items)) for j in range(i + 1, len(items))]
