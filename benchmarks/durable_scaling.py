"""Durable scaling: cost per durable step with 10k vs 1M rows already in ``workflow_runs``.

The 3-step workflow of ``benchmarks.durable_runtime`` runs with one worker on PostgreSQL while
the table holds 10,000 and then 1,000,000 other runs (99% finished, 1% active and waiting on a
timer a day away, as a busy installation would have). Steps/s should stay flat: the worker's
queries must go through indexes. Shown beside the rates: the table's sequential vs index scans
during the measured run (``pg_stat_user_tables``), and the plans PostgreSQL chose for the
store's statements at 1M rows, captured with ``auto_explain`` from the server log when it is
readable. Everything happens in a database of its own (``statecharts_bench_scale``, dropped at
the end), so ``auto_explain`` is switched on for that database's sessions only.
Run: ``python -m benchmarks.durable_scaling [--n 300] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from benchmarks.databases import bench_dsn, reset_database, with_database
from benchmarks.durable_rows import STEPS
from benchmarks.durable_runtime import three_steps_machine
from benchmarks.timing import fmt_rate

DATABASE = "statecharts_bench_scale"
SIZES = (10_000, 1_000_000)
SERVER_LOG = Path("/var/log/postgresql")  # Debian's place for the cluster's stderr log


@dataclass(frozen=True)
class ScaleRow:
    """The 3-step workflow's rate with ``rows`` other runs in the table."""

    rows: int
    rates: tuple[float, ...]
    seq_scans: int
    idx_scans: int
    note: str = ""

    @property
    def steps(self) -> float:
        """Median steps per second."""
        ordered = sorted(self.rates)
        return ordered[len(ordered) // 2] * STEPS if ordered else 0.0


@dataclass
class ScaleReport:
    """Rows per table size, and the plans captured at the largest size."""

    rows: list[ScaleRow] = field(default_factory=list)
    plans: list[str] = field(default_factory=list)
    note: str = ""


def fill(dsn: str, upto: int, have: int) -> None:
    """Add runs until the table holds ``upto`` of them (99% done, 1% active, waking in a day)."""
    import psycopg

    add = upto - have
    if add <= 0:
        return
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO workflow_runs (id, workflow_name, workflow_version, key, state, snapshot,"
            " status, created_at, updated_at, completed_at, wake_at) "
            "SELECT gen_random_uuid(), 'filler', 'v1', NULL, 'finished', "
            "jsonb_build_object('filler', g), CASE WHEN g %% 100 = 0 THEN 'active' ELSE 'done' END,"
            " now(), now(), CASE WHEN g %% 100 = 0 THEN NULL ELSE now() END, "
            "CASE WHEN g %% 100 = 0 THEN now() + interval '1 day' END "
            "FROM generate_series(%s::bigint, %s::bigint) g",
            (have + 1, upto),
        )
        conn.execute("ANALYZE workflow_runs")


def scans(dsn: str) -> tuple[int, int]:
    """Cumulative (sequential, index) scans of ``workflow_runs`` in the bench schema."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT coalesce(seq_scan, 0), coalesce(idx_scan, 0) FROM pg_stat_user_tables "
            "WHERE schemaname = 'public' AND relname = 'workflow_runs'"
        ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def measure(dsn: str, n: int, repeat: int) -> ScaleRow | str:
    """The workflow's rate at the current table size (or why it could not run)."""
    from benchmarks.durable_runtime import check_outputs, drive

    try:
        from persistence import open_store
        from persistence.runtime import Runtime
        from persistence.worker import Worker
    except ImportError as exc:
        return f"persistence runtime not available ({exc})"
    rates = []
    seq0, idx0 = scans(dsn)
    for r in range(repeat):
        store = open_store(dsn)
        try:
            runtime = Runtime(store, machines=[three_steps_machine()])
            rate, _, ids = drive(runtime, Worker, 1, n, offset=r * n)
            check_outputs(runtime, ids, offset=r * n)
            rates.append(rate)
        finally:
            store.close()
    time.sleep(1.0)  # backends report their table statistics at most once a second
    seq1, idx1 = scans(dsn)
    return ScaleRow(0, tuple(rates), seq1 - seq0, idx1 - idx0)


def capture_plans(dsn: str, n: int) -> tuple[list[str], str]:
    """Run ``n`` workflows with auto_explain in their sessions; the distinct plans logged."""
    from benchmarks.durable_runtime import drive
    from persistence import open_store
    from persistence.runtime import Runtime
    from persistence.worker import Worker

    log = server_log()
    if log is None:
        return [], "server log not readable here: plans not captured"
    offset = log.stat().st_size
    explain_in_database(dsn, DATABASE, on=True)
    try:
        store = open_store(dsn)
        try:
            drive(Runtime(store, machines=[three_steps_machine()]), Worker, 1, n, offset=10**7)
        finally:
            store.close()
    finally:
        explain_in_database(dsn, DATABASE, on=False)
    return distinct_plans(log_since(log, offset), DATABASE), ""


def explain_in_database(dsn: str, database: str, on: bool) -> None:
    """Load auto_explain into new sessions of `database` only (or stop doing so): every
    statement's plan is logged, in JSON, to the server log."""
    import psycopg

    from benchmarks.databases import with_database

    with psycopg.connect(with_database(dsn, "postgres"), autocommit=True) as conn:
        if on:
            conn.execute(
                f"ALTER DATABASE {database} SET session_preload_libraries = 'auto_explain'"
            )
            conn.execute(f"ALTER DATABASE {database} SET auto_explain.log_min_duration = 0")
            conn.execute(f"ALTER DATABASE {database} SET auto_explain.log_format = 'json'")
        else:
            conn.execute(f"ALTER DATABASE {database} RESET ALL")


def log_since(log: Path, offset: int) -> str:
    """The server log's text from byte `offset` on."""
    with log.open("rb") as fh:
        fh.seek(offset)
        return fh.read().decode("utf-8", "replace")


def server_log() -> Path | None:
    """The cluster's stderr log, if this process may read it (None otherwise)."""
    logs = sorted(SERVER_LOG.glob("postgresql-*-main.log")) if SERVER_LOG.is_dir() else []
    for path in logs:
        if os.access(path, os.R_OK):
            return path
    return None


_ENTRY = re.compile(r"^\S+ \S+ \S+ \[\d+\]", re.MULTILINE)  # "2026-11-30 00:31:02.123 UTC [pid]"
_DURATION = re.compile(r"duration: ([\d.]+) ms")


def distinct_plans(log_text: str, database: str) -> list[str]:
    """auto_explain (JSON format) entries of `database`'s sessions touching ``workflow_runs``
    in a server log, rendered as indented plan trees, one per distinct statement (literal
    values differ per execution)."""
    seen: dict[str, str] = {}
    for query, plan, _ in logged_plans(log_text, database):
        if query not in seen:
            seen[query] = f"{query}\n\n" + render_plan(plan)
    return list(seen.values())


def logged_plans(log_text: str, database: str) -> list[tuple[str, dict[str, Any], float]]:
    """Every auto_explain (JSON format) entry of `database`'s sessions touching
    ``workflow_runs`` in a server log, in order: the statement (whitespace folded), its plan's
    root node and how long the server took to run it (ms)."""
    starts = [m.start() for m in _ENTRY.finditer(log_text)] + [len(log_text)]
    found = []
    for begin, end in pairwise(starts):
        entry = log_text[begin:end]
        head = entry.split("\n", 1)[0]
        if f"@{database} " not in head or "plan:" not in entry or "workflow_runs" not in entry:
            continue
        raw = "\n".join(line.removeprefix("\t") for line in entry.split("plan:", 1)[1].splitlines())
        try:
            explained = json.loads(raw)
        except ValueError:
            continue
        query = re.sub(r"\s+", " ", str(explained.get("Query Text", ""))).strip()
        took = _DURATION.search(head)
        found.append((query, explained.get("Plan", {}), float(took.group(1)) if took else 0.0))
    return found


def render_plan(plan: dict[str, Any]) -> str:
    """A plan's root node as an indented tree, a line per node."""
    return "\n".join(_plan_lines(plan, 0))


_DETAILS = (
    "Index Cond",
    "Filter",
    "Join Filter",
    "Hash Cond",
    "Recheck Cond",
    "Conflict Arbiter Indexes",
)


def _plan_lines(node: dict[str, Any], depth: int) -> list[str]:
    """One line per plan node (type, relation, index, conditions), children indented."""
    head = str(node.get("Node Type", "?"))
    if node.get("Index Name"):
        head += f" using {node['Index Name']}"
    if node.get("Relation Name"):
        head += f" on {node['Relation Name']}"
    if node.get("CTE Name"):
        head += f" ({node['CTE Name']})"
    details = [f"{key}: {node[key]}" for key in _DETAILS if node.get(key)]
    lines = ["  " * depth + ("-> " if depth else "") + head]
    lines += ["  " * depth + "     " + detail for detail in details]
    for child in node.get("Plans", []):
        lines += _plan_lines(child, depth + 1)
    return lines


def run(n: int = 300, repeat: int = 3) -> ScaleReport:
    """Measure at each size; capture plans at the largest."""
    import psycopg

    report = ScaleReport()
    try:
        from persistence import open_store
    except ImportError as exc:
        report.note = f"skipped: persistence runtime not available ({exc})"
        return report
    try:
        reset_database(bench_dsn(), DATABASE)
        with psycopg.connect(with_database(bench_dsn(), "postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        dsn = with_database(bench_dsn(), DATABASE)
        open_store(dsn, migrate=True).close()
    except Exception as exc:  # no PostgreSQL here: say so
        report.note = f"skipped: PostgreSQL not usable ({str(exc).strip()[:200]})"
        return report
    have = 0
    for size in SIZES:
        fill(dsn, size, have)
        have = size
        got = measure(dsn, n, repeat)
        if isinstance(got, str):
            report.note = f"skipped: {got}"
            return report
        report.rows.append(ScaleRow(size, got.rates, got.seq_scans, got.idx_scans))
    try:
        report.plans, report.note = capture_plans(dsn, 20)
    finally:
        reset_database(bench_dsn(), DATABASE)
    return report


def markdown(report: ScaleReport) -> str:
    """Rates per table size, scan counts, and the captured plans."""
    lines = [
        "| other runs in workflow_runs | workflows/s (median) | steps/s | cost ÷ 10k rows | "
        "seq scans of workflow_runs | index scans |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    base = report.rows[0].steps if report.rows else 0.0
    for row in report.rows:
        rel = f"{base / row.steps:.2f}" if row.steps else "—"
        lines.append(
            f"| {row.rows:,} | {fmt_rate(row.steps / STEPS)} | {fmt_rate(row.steps)} | "
            f"{rel} | {row.seq_scans:,} | {row.idx_scans:,} |"
        )
    out = "\n".join(lines) + "\n"
    if report.note:
        out += f"\n{report.note}\n"
    if report.plans:
        out += (
            "\n<details><summary>Plans of the store's statements on workflow_runs at 1M "
            "rows (auto_explain)</summary>\n\n"
        )
        out += "\n".join(f"```text\n{plan}\n```\n" for plan in report.plans)
        out += "</details>\n"
    return out


def main(argv: list[str] | None = None) -> None:
    """Command line: run the durable scaling benchmark and print its table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300, help="workflows per measured run")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    print(markdown(run(args.n, args.repeat)))


if __name__ == "__main__":
    main()
