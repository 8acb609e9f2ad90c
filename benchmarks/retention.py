"""Retention, measured (issue 41): bytes per finished run on each store, and table sizes flat
over many runs with retention on.

1. Bytes per finished run: `--sample` runs of the 3-step workflow (three calls, three steps,
   `benchmarks.durable_runtime`) driven to their end with `Inline.run` on a fresh database;
   the database's growth divided by the runs, per table (SQLite: used pages, after a WAL
   checkpoint; PostgreSQL: `pg_total_relation_size` of each table with its indexes and TOAST,
   after a plain `VACUUM`, as autovacuum would leave it).
2. Flat with retention: `--runs` runs in waves of `--wave`, the simulated clock a minute on per
   wave, `Runtime(retention={workflow: --keep-minutes})` applied after each wave as a worker's
   report interval does (`Runtime.apply_retention`, bounded per pass); rows per table and the
   database size at every tenth of the way. With retention the rows stay at about
   keep-minutes x wave runs' worth and the size stops growing once the freed space is reused.

Opt-in (not in `make bench`): ``python -m benchmarks.retention [--runs 100000] [--wave 500]
[--keep-minutes 10] [--sample 2000] [--backend sqlite|postgres|both]``; PostgreSQL is the bench
DSN (STATECHARTS_BENCH_DSN / STATECHARTS_TEST_DSN), in a schema of its own, dropped after.
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.databases import store_url_or_scratch
from benchmarks.durable_runtime import WORKFLOW, three_steps_machine

TABLES = (
    "workflow_runs",
    "workflow_events",
    "workflow_effects",
    "workflow_inbox",
    "workflow_calls",
    "workflow_call_attempts",
    "workflow_deliveries",
    "workflow_key_tombstones",
)
T0 = 1_800_000_000_000


def _sizes(url: str) -> dict[str, int]:
    """Bytes per table (with its indexes), and "total"."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[1].split("?", 1)[0]
        with sqlite3.connect(path) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            page = db.execute("PRAGMA page_size").fetchone()[0]
            used = (
                db.execute("PRAGMA page_count").fetchone()[0]
                - db.execute("PRAGMA freelist_count").fetchone()[0]
            )
            sizes = {"total": used * page, "file": Path(path).stat().st_size}
            try:  # per table, where SQLite was built with the dbstat table
                for name, size in db.execute(
                    "SELECT coalesce(i.tbl_name, s.name), sum(pgsize) "
                    "FROM dbstat s LEFT JOIN sqlite_master i ON "
                    "i.name = s.name GROUP BY 1"
                ):
                    if name in TABLES:
                        sizes[name] = size
            except sqlite3.OperationalError:
                pass
            return sizes
    import psycopg

    dsn, _, schema = url.rpartition("schema=")
    with psycopg.connect(dsn.rstrip("?&"), autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        conn.execute("VACUUM")
        sizes = {
            t: int(
                conn.execute(
                    "SELECT pg_total_relation_size(%s)",  # type: ignore[index]
                    (t,),
                ).fetchone()[0]
            )
            for t in TABLES
        }
        sizes["total"] = sum(sizes.values())
        return sizes


def _rows(store: Any) -> dict[str, int]:
    return {t: int(store._read(f"SELECT count(*) FROM {t}")[0][0]) for t in TABLES}


def _drive(inline: Any, n: int, first: int) -> None:
    """`n` runs driven to their end, each with a key (as a webhook's start has)."""
    for x in range(first, first + n):
        inline.run(WORKFLOW, {"x": x}, key=f"order-{x}")


def bytes_per_run(url: str, sample: int) -> dict[str, float]:
    """The database's growth per finished run, per table and in all."""
    from persistence.inline import Inline
    from persistence.runtime import Runtime
    from persistence.stores import open_store

    store = open_store(url, migrate=True)
    try:
        inline = Inline(Runtime(store, [three_steps_machine()]))
        _drive(inline, 50, 10**6)  # warm-up: the first pages of every table and index
        before = _sizes(url)
        _drive(inline, sample, 0)
        after = _sizes(url)
    finally:
        store.close()
    return {t: (after[t] - before.get(t, 0)) / sample for t in after if t != "file"}


def flat(url: str, runs: int, wave: int, keep_minutes: int) -> list[dict[str, Any]]:
    """Rows and size at every tenth of `runs`, with retention on."""
    from persistence.inline import Inline
    from persistence.runtime import Runtime
    from persistence.stores import open_store
    from statecharts import SimulatedClock

    store = open_store(url, migrate=True)
    clock = SimulatedClock(T0)
    runtime = Runtime(
        store,
        [three_steps_machine()],
        clock=clock,
        retention={WORKFLOW: keep_minutes * 60_000},
        key_window="1h",
    )
    inline = Inline(runtime)
    points: list[dict[str, Any]] = []
    started, purged, t0 = 0, 0, time.perf_counter()
    try:
        while started < runs:
            n = min(wave, runs - started)
            _drive(inline, n, started)
            started += n
            clock.advance(60_000)
            purged += runtime.apply_retention()
            if started * 10 // runs > (started - n) * 10 // runs or started == runs:
                sizes = _sizes(url)
                points.append(
                    {
                        "runs": started,
                        "purged": purged,
                        **_rows(store),
                        "bytes": sizes["total"],
                        "file": sizes.get("file"),
                        "seconds": round(time.perf_counter() - t0, 1),
                    }
                )
                print(points[-1], flush=True)
    finally:
        store.close()
    return points


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--wave", type=int, default=500)
    parser.add_argument("--keep-minutes", type=int, default=10)
    parser.add_argument("--sample", type=int, default=2_000)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    args = parser.parse_args(argv)
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    for backend in backends:
        for part in ("bytes", "flat"):
            with _database(backend, part) as url:
                if part == "bytes":
                    per_run = bytes_per_run(url, args.sample)
                    print(
                        f"{backend}: bytes per finished run (3-step workflow, {args.sample} "
                        "runs): " + ", ".join(f"{t} {v:.0f}" for t, v in per_run.items() if v),
                        flush=True,
                    )
                else:
                    print(
                        f"{backend}: {args.runs} runs, waves of {args.wave}, kept "
                        f"{args.keep_minutes} min",
                        flush=True,
                    )
                    flat(url, args.runs, args.wave, args.keep_minutes)


@contextmanager
def _database(backend: str, part: str) -> Iterator[str]:
    """A fresh database's URL: a SQLite file in a temporary folder, or a scratch schema."""
    if backend == "postgres":
        with store_url_or_scratch(None, f"retention_{part}") as url:
            yield url
        return
    with tempfile.TemporaryDirectory() as tmp:
        yield f"sqlite:///{tmp}/runs.db?synchronous=normal"


if __name__ == "__main__":
    main()
