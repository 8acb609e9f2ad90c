"""Durable benchmark: what the database can do, DBOS Transact, and this project's runtime.

In one run, on the same local PostgreSQL (``STATECHARTS_BENCH_DSN``, else
``STATECHARTS_TEST_DSN``, else ``postgresql://localhost/test``) and on SQLite files:

* raw: single-row ``jsonb`` UPDATE transactions (autocommit, psycopg 3), each client updating its
  own row with a snapshot-sized document: commits/s with 1 and 4 clients (threads, one
  connection each). The same on SQLite (WAL, one connection per client, ``synchronous=FULL``,
  which is the project's SQLiteStore default, and ``NORMAL`` for reference).
* DBOS Transact: a 3-step workflow (each step's result checkpointed) with 1 and 4 clients, run
  in a subprocess (``benchmarks.dbos_workflow``) against a fresh database on the same server,
  and on a SQLite file: workflows/s and steps/s.
* this project: the same 3-step workflow (three invoked steps, each result persisted) through
  ``persistence.Runtime`` and ``Worker(runtime, concurrency=N)`` (default settings) with 1 and 4
  worker threads (see ``durable_runtime.py``): workflows/s over starts and steps together (the
  row comparable with DBOS), and over the workers' time alone (durable transitions per second
  of the workers, the row compared with the raw UPDATE rate).
* the database's part of this project's one-in-flight row: the statements one ``Inline.run``
  sent, replayed by psycopg alone for fresh run ids (``durable_runtime.replayed_postgres``).
* encrypted payloads: this project's batched-worker and one-in-flight rows again with every
  payload sealed by a key ring (AES-GCM, ``persistence.stores.codec``), and the overhead
  table: each encrypted row's rate over its plain row's (``encryption_markdown``).

Run: ``python -m benchmarks.durable [--n 600] [--raw-n 3000] [--repeat 3]``; only the
encryption comparison: ``python -m benchmarks.durable --encryption``.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks import durable_runtime
from benchmarks.databases import (
    DATABASE_PREFIX,
    bench_dsn,
    reset_database,
    with_database,
)
from benchmarks.durable_rows import STEPS, DurableRow, in_threads
from benchmarks.durable_runtime import LATENCY_EVENTS, LATENCY_WARM_UP, STEP_GAP_S
from benchmarks.timing import fmt_rate

BENCHMARK = "durable"
CLIENTS = (1, 4)
RAW_TABLE = "bench_raw_update"
_APART = f"committed, {STEP_GAP_S * 1000:g} ms apart"
FLOOR_PG = f"the floor: one single-row jsonb UPDATE alone (psycopg 3), {_APART}"
FLOOR_SQLITE = f"the floor: one single-row JSON UPDATE alone (sqlite3), {_APART}"
"""The latency rows' floor (`floor_postgres`, `floor_sqlite`): worded without "raw", which
the throughput rows' comparisons look for."""
DBOS_DATABASE = f"{DATABASE_PREFIX}_dbos"


def snapshot_document(i: int) -> dict[str, Any]:
    """A JSON document shaped and sized like a persisted 3-step-workflow snapshot."""
    return {
        "format": 1,
        "machine": "three_steps",
        "version": None,
        "fingerprint": "9f2c" * 16,
        "value": "double",
        "context": {"x": i, "results": {"add_one": i + 1}},
        "status": "active",
        "output": None,
        "error": None,
        "history": {},
        "timers": [],
        "children": {"double": {"src": "double", "input": {"x": i + 1}, "status": "active"}},
    }


# ----------------------------------------------------------------------------- raw PostgreSQL
def raw_postgres(dsn: str, clients: int, n: int, repeat: int) -> DurableRow:
    """Single-row jsonb UPDATE commits/s, ``n`` per run split over ``clients`` connections."""
    import psycopg
    from psycopg.types.json import Jsonb

    with psycopg.connect(dsn, autocommit=True) as conn:
        sql = _raw_table(conn, RAW_TABLE, clients)
    per_client = n // clients

    def client(c: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for i in range(per_client):
                cur = conn.execute(sql, (Jsonb(snapshot_document(i)), c))
                assert cur.rowcount == 1, "raw UPDATE matched no row"

    in_threads(clients, lambda c: _warm_pg(dsn, sql, c))
    rates = tuple(per_client * clients / in_threads(clients, client) for _ in range(repeat))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {RAW_TABLE}")
    return DurableRow(
        f"PostgreSQL {_pg_server_version(dsn)}",
        clients,
        "raw single-row jsonb UPDATE (psycopg 3)",
        "commits/s",
        1,
        per_client * clients,
        rates,
    )


def floor_postgres(dsn: str, backend: str, events: int = LATENCY_EVENTS) -> DurableRow:
    """The floor under the step latency rows: one single-row jsonb UPDATE of a snapshot-sized
    document alone, committed, on one connection (psycopg alone: no engine, runtime or
    store), as many times as the steps and as far apart (`spaced`); its p50 and p99."""
    import psycopg
    from psycopg.types.json import Jsonb

    table = f"{RAW_TABLE}_floor"
    with psycopg.connect(dsn, autocommit=True) as conn:
        sql = _raw_table(conn, table, 1)
        try:
            latencies = spaced(
                lambda i: conn.execute(sql, (Jsonb(snapshot_document(i)), 0)), events
            )
        finally:
            conn.execute(f"DROP TABLE {table}")
    return durable_runtime.latency_row(backend, FLOOR_PG, latencies)


def _raw_table(conn: Any, table: str, rows: int) -> str:
    """`table` made anew for single-row UPDATEs (the raw commits' and the floor's alike): ids
    0 to `rows` - 1, each with an empty document; the UPDATE that writes one (document, id)."""
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, doc jsonb NOT NULL)")
    conn.execute(f"INSERT INTO {table} SELECT g, '{{}}' FROM generate_series(0, %s) g", (rows - 1,))
    return f"UPDATE {table} SET doc = %s WHERE id = %s"


def spaced(write: Callable[[int], Any], events: int) -> list[float]:
    """Seconds each of `events` calls of `write(i)` took, after `LATENCY_WARM_UP` untimed ones,
    each `STEP_GAP_S` after the last returned (as `durable_runtime.idle_worker_steps`)."""
    took = []
    for i in range(events + LATENCY_WARM_UP):
        time.sleep(STEP_GAP_S)
        t0 = time.perf_counter()
        write(i)
        if i >= LATENCY_WARM_UP:
            took.append(time.perf_counter() - t0)
    return took


def _warm_pg(dsn: str, sql: str, c: int) -> None:
    import psycopg
    from psycopg.types.json import Jsonb

    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(50):
            conn.execute(sql, (Jsonb(snapshot_document(i)), c))


def _pg_server_version(dsn: str) -> str:
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]).split()[0] if row else "?"


# ----------------------------------------------------------------------------- raw SQLite
def raw_sqlite(directory: Path, clients: int, n: int, repeat: int, synchronous: str) -> DurableRow:
    """Single-row JSON UPDATE commits/s on a WAL SQLite file, one connection per client."""
    import orjson

    path = directory / f"raw-{synchronous.lower()}-{clients}.db"
    setup = _sqlite_connect(path, synchronous)
    sql = _raw_sqlite_table(setup, clients)
    setup.close()
    per_client = n // clients

    def client(c: int) -> None:
        conn = _sqlite_connect(path, synchronous)
        try:
            for i in range(per_client):
                cur = conn.execute(sql, (orjson.dumps(snapshot_document(i)).decode(), c))
                assert cur.rowcount == 1, "raw UPDATE matched no row"
        finally:
            conn.close()

    rates = tuple(per_client * clients / in_threads(clients, client) for _ in range(repeat))
    return DurableRow(
        f"SQLite {sqlite3.sqlite_version} (WAL, synchronous={synchronous})",
        clients,
        "raw single-row JSON UPDATE (sqlite3)",
        "commits/s",
        1,
        per_client * clients,
        rates,
    )


def floor_sqlite(directory: Path, backend: str, events: int = LATENCY_EVENTS) -> DurableRow:
    """`floor_postgres` on a WAL SQLite file (synchronous=FULL, as the latency rows' store)."""
    import orjson

    conn = _sqlite_connect(directory / "floor.db", "FULL")
    try:
        sql = _raw_sqlite_table(conn, 1)
        latencies = spaced(
            lambda i: conn.execute(sql, (orjson.dumps(snapshot_document(i)).decode(), 0)), events
        )
    finally:
        conn.close()
    return durable_runtime.latency_row(backend, FLOOR_SQLITE, latencies)


def _raw_sqlite_table(conn: sqlite3.Connection, rows: int) -> str:
    """`_raw_table` in a SQLite file (its table `raw`, kept if there: rows reset)."""
    conn.execute("CREATE TABLE IF NOT EXISTS raw (id INTEGER PRIMARY KEY, doc TEXT NOT NULL)")
    conn.executemany("INSERT OR REPLACE INTO raw VALUES (?, '{}')", [(c,) for c in range(rows)])
    return "UPDATE raw SET doc = ? WHERE id = ?"


def _sqlite_connect(path: Path, synchronous: str) -> sqlite3.Connection:
    # autocommit (isolation_level=None): every UPDATE is its own committed transaction
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    return conn


# ----------------------------------------------------------------------------- DBOS Transact
def dbos(url: str, backend: str, clients: int, n: int, repeat: int) -> DurableRow:
    """DBOS's 3-step workflow in a subprocess; workflows/s per run."""
    argv = [
        sys.executable,
        "-m",
        "benchmarks.dbos_workflow",
        "--url",
        url,
        "--n",
        str(n),
        "--clients",
        str(clients),
        "--repeat",
        str(repeat),
    ]
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(argv, capture_output=True, text=True, cwd=root, timeout=1200, check=False)
    if done.returncode != 0:
        why = done.stderr.strip().splitlines()[-1:] or ["no output"]
        return DurableRow(
            backend,
            clients,
            "DBOS Transact",
            "workflows/s",
            STEPS,
            n,
            (),
            note=f"failed: {why[0][:200]}",
        )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return DurableRow(
        backend,
        clients,
        f"DBOS Transact {result['version']}",
        "workflows/s",
        STEPS,
        n,
        tuple(result["rates"]),
    )


# ----------------------------------------------------------------------------- the table
def markdown(rows: list[DurableRow]) -> str:
    """The throughput table (per backend and client count: raw commits, DBOS and this project's
    rows side by side, the equal-concurrency row first), then the step latency table."""
    lines = [
        "| backend | clients / in flight | subject | n per run | median | steps or commits/s | "
        "÷ raw commits/s | ÷ DBOS (workflows/s) | transactions per workflow | commits per step "
        "| note |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in (r for r in rows if r.unit != "ms"):
        raw = _find(rows, r.backend, r.clients, "raw")
        dbos = _find(rows, r.backend, r.clients, "DBOS")
        vs_raw = f"{r.steps / raw.steps:.0%}" if raw and r.ok and r.unit != "commits/s" else ""
        vs_dbos = ""
        if dbos and r.ok and r.subject.startswith("statecharts"):
            vs_dbos = f"**{r.median / dbos.median:.2f}x**"
        tx = r.per_workflow
        per_wf = f"{tx:.2f}" if tx is not None else ("1" if r.unit == "commits/s" else "")
        per_step = (
            f"{tx / r.steps_per_unit:.2f}"
            if tx is not None
            else ("1" if r.unit == "commits/s" else "")
        )
        median = f"{fmt_rate(r.median)} {r.unit}" if r.ok else "—"
        steps = fmt_rate(r.steps) if r.ok else "—"
        lines.append(
            f"| {r.backend} | {r.clients} | {r.subject} | {r.n:,} | {median} | {steps} "
            f"| {vs_raw} | {vs_dbos} | {per_wf} | {per_step} | {r.note} |"
        )
    latency = [r for r in rows if r.unit == "ms"]
    if latency:
        lines += [
            "",
            "| backend | subject | events per run | p50 | p99 | note |",
            "|---|---|---:|---:|---:|---|",
        ]
        for r in latency:
            p50 = f"{r.median:.2f} ms" if r.ok else "—"
            p99 = f"{statistics.median(r.p99):.2f} ms" if r.p99 else "—"
            lines.append(f"| {r.backend} | {r.subject} | {r.n:,} | {p50} | {p99} | {r.note} |")
    return "\n".join(lines) + "\n"


def _find(rows: list[DurableRow], backend: str, clients: int, prefix: str) -> DurableRow | None:
    return next(
        (
            r
            for r in rows
            if r.backend == backend
            and r.clients == clients
            and r.subject.startswith(prefix)
            and r.ok
        ),
        None,
    )


Measurement = Callable[[], "DurableRow | list[DurableRow]"]


def interleaved(measurements: list[Measurement], repeat: int) -> list[DurableRow]:
    """Call each one-run measurement in turn, ``repeat`` times over; merge each subject's runs.

    Subjects alternate run by run so that load from other processes falls on all of them alike.
    """
    merged: dict[tuple[str, int, str], DurableRow] = {}
    for _ in range(repeat):
        for one in measurements:
            got = one()
            for row in got if isinstance(got, list) else [got]:
                key = (row.backend, row.clients, row.subject)
                seen = merged.get(key)
                merged[key] = (
                    row
                    if seen is None
                    else replace(
                        seen,
                        rates=seen.rates + row.rates,
                        note=seen.note or row.note,
                        transactions=seen.transactions + row.transactions,
                        p99=seen.p99 + row.p99,
                    )
                )
    return list(merged.values())


def run(n: int = 600, raw_n: int = 3_000, repeat: int = 3) -> list[DurableRow]:
    """Every durable measurement, PostgreSQL first, then SQLite; subjects interleaved."""

    dsn = bench_dsn()
    rows: list[DurableRow] = []
    try:
        pg = f"PostgreSQL {_pg_server_version(dsn)}"
    except Exception as exc:  # PostgreSQL missing or down: say so, go on with SQLite
        pg = ""
        rows.append(
            DurableRow(
                "PostgreSQL",
                1,
                "raw single-row jsonb UPDATE",
                "commits/s",
                1,
                raw_n,
                (),
                note=f"skipped: {str(exc).strip()[:200]}",
            )
        )
    if pg:
        reset_database(dsn, DBOS_DATABASE)
        url = with_database(dsn, DBOS_DATABASE)
        for clients in CLIENTS:
            rows += interleaved(
                [
                    partial(raw_postgres, dsn, clients, raw_n, 1),
                    partial(dbos, url, pg, clients, n, 1),
                    partial(durable_runtime.inline_postgres, dsn, pg, clients, n),
                    *(
                        [partial(durable_runtime.replayed_postgres, dsn, pg, n)]
                        if clients == 1
                        else []
                    ),
                    partial(durable_runtime.measure_postgres, dsn, pg, clients, n, 1),
                    *(
                        [
                            partial(floor_postgres, dsn, pg),
                            partial(_pg_latency, dsn, pg),
                            partial(_pg_latency, dsn, pg, False),
                        ]
                        if clients == 1
                        else []
                    ),
                    *_encrypted_pg(dsn, pg, clients, n),
                ],
                repeat,
            )
        reset_database(dsn, DBOS_DATABASE)
    with tempfile.TemporaryDirectory(prefix="statecharts-bench-") as tmp:
        directory = Path(tmp)
        lite = f"SQLite {sqlite3.sqlite_version} (WAL, synchronous=FULL)"
        for clients in CLIENTS:
            sqlite_url = f"sqlite:///{directory / f'dbos-{clients}.sqlite'}"
            rows += interleaved(
                [
                    partial(raw_sqlite, directory, clients, raw_n, 1, "FULL"),
                    partial(raw_sqlite, directory, clients, raw_n, 1, "NORMAL"),
                    partial(_dbos_sqlite, sqlite_url, lite, clients, n),
                    partial(durable_runtime.inline_sqlite, directory, lite, clients, n),
                    partial(durable_runtime.measure_sqlite, directory, lite, clients, n, 1),
                    *(
                        [
                            partial(floor_sqlite, directory, lite),
                            partial(_sqlite_latency, directory, lite),
                            partial(_sqlite_latency, directory, lite, False),
                        ]
                        if clients == 1
                        else []
                    ),
                    *_encrypted_sqlite(directory, lite, clients, n),
                ],
                repeat,
            )
    return rows


def _encrypted_pg(dsn: str, backend: str, clients: int, n: int) -> list[Measurement]:
    """The encrypted variants of this project's PostgreSQL rows (one run each)."""

    return [
        partial(durable_runtime.inline_postgres, dsn, backend, clients, n, True),
        partial(durable_runtime.measure_postgres, dsn, backend, clients, n, 1, True),
    ]


def _encrypted_sqlite(directory: Path, backend: str, clients: int, n: int) -> list[Measurement]:
    """The encrypted variants of this project's SQLite rows (one run each)."""

    return [
        partial(durable_runtime.inline_sqlite, directory, backend, clients, n, True),
        partial(durable_runtime.measure_sqlite, directory, backend, clients, n, 1, True),
    ]


def run_encryption(n: int = 600, repeat: int = 3) -> list[DurableRow]:
    """Only the encryption comparison: this project's rows plain and encrypted, interleaved
    run by run, on PostgreSQL (if it answers) and SQLite."""

    dsn, rows = bench_dsn(), []
    try:
        pg = f"PostgreSQL {_pg_server_version(dsn)}"
    except Exception as exc:  # PostgreSQL missing or down: say so, go on with SQLite
        pg = ""
        print(f"PostgreSQL skipped: {str(exc).strip()[:200]}")
    for clients in CLIENTS if pg else ():
        rows += interleaved(
            [
                partial(durable_runtime.inline_postgres, dsn, pg, clients, n),
                partial(durable_runtime.measure_postgres, dsn, pg, clients, n, 1),
                *_encrypted_pg(dsn, pg, clients, n),
            ],
            repeat,
        )
    with tempfile.TemporaryDirectory(prefix="statecharts-bench-") as tmp:
        lite = f"SQLite {sqlite3.sqlite_version} (WAL, synchronous=FULL)"
        for clients in CLIENTS:
            rows += interleaved(
                [
                    partial(durable_runtime.inline_sqlite, Path(tmp), lite, clients, n),
                    partial(durable_runtime.measure_sqlite, Path(tmp), lite, clients, n, 1),
                    *_encrypted_sqlite(Path(tmp), lite, clients, n),
                ],
                repeat,
            )
    return rows


def codec_cost(n: int = 20_000) -> str:
    """The codec's own cost, in CPU time (less disturbed by other processes than the rates):
    sealing and opening a snapshot-sized document, beside plain JSON of it, and the bytes
    stored, as one Markdown line."""
    import orjson

    from persistence.stores.codec import KeyRing

    ring, run_id = KeyRing(list(durable_runtime.BENCH_KEYS)), "2b1418e4-87aa-41ad-aae8-4a9e0c724877"
    docs = [snapshot_document(i) for i in range(n)]
    began = time.process_time()
    plain = [orjson.dumps(d) for d in docs]
    dumped = time.process_time() - began
    began = time.process_time()
    sealed = [orjson.dumps(ring.seal(d, run_id, "snapshot")) for d in docs]
    seal = time.process_time() - began
    began = time.process_time()
    opened = [ring.open(orjson.loads(e), run_id, "snapshot") for e in sealed]
    open_ = time.process_time() - began
    assert opened == docs
    return (
        f"Codec CPU per snapshot-sized document ({len(plain[0])} bytes of JSON, "
        f"{len(sealed[0])} sealed): JSON alone {dumped / n * 1e6:.1f} µs, sealed "
        f"{seal / n * 1e6:.1f} µs, opened {open_ / n * 1e6:.1f} µs.\n"
    )


def encryption_markdown(rows: list[DurableRow]) -> str:
    """Each encrypted row beside its plain row (same backend, clients and shape): the rates'
    medians and encrypted ÷ plain."""

    lines = [
        "| backend | clients / in flight | subject | plain | encrypted | encrypted ÷ plain |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        shape = next((e for e in durable_runtime.PLAIN_OF if r.subject.endswith(e)), None)
        if shape is None or not r.ok:
            continue
        plain = next(
            (
                p
                for p in rows
                if p.backend == r.backend
                and p.clients == r.clients
                and p.subject.endswith(durable_runtime.PLAIN_OF[shape])
                and p.ok
            ),
            None,
        )
        if plain is None:
            continue
        lines.append(
            f"| {r.backend} | {r.clients} | {durable_runtime.PLAIN_OF[shape]} | "
            f"{fmt_rate(plain.median)} {r.unit} | {fmt_rate(r.median)} {r.unit} | "
            f"**{r.median / plain.median:.2f}** |"
        )
    return "\n".join(lines) + "\n"


def _pg_latency(dsn: str, backend: str, step_in_send: bool = True) -> DurableRow:
    """The step latency on PostgreSQL, in a schema of its own (dropped afterwards); with
    `step_in_send=False`, of the event queued for the idle worker."""
    import psycopg

    schema = f"bench_latency_{os.getpid()}"
    try:
        return durable_runtime.step_latency(
            f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}", backend, step_in_send=step_in_send
        )
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _sqlite_latency(directory: Path, backend: str, step_in_send: bool = True) -> DurableRow:

    name = "latency.db" if step_in_send else "latency-queued.db"
    return durable_runtime.step_latency(
        f"sqlite:///{directory / name}", backend, step_in_send=step_in_send
    )


def _dbos_sqlite(url: str, backend: str, clients: int, n: int) -> DurableRow:
    peer = dbos(url, backend, clients, n, 1)
    return replace(peer, note=peer.note or "DBOS's own SQLite settings")


def main(argv: list[str] | None = None) -> None:
    """Command line: run the durable benchmark and print its table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=600, help="workflows per run")
    ap.add_argument("--raw-n", type=int, default=3_000, help="raw UPDATE commits per run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--encryption",
        action="store_true",
        help="only this project's rows, plain and with encrypted payloads",
    )
    args = ap.parse_args(argv)
    rows = (
        run_encryption(args.n, args.repeat)
        if args.encryption
        else run(args.n, args.raw_n, args.repeat)
    )
    print(markdown(rows))
    print(encryption_markdown(rows))
    print(codec_cost())


if __name__ == "__main__":
    main()
