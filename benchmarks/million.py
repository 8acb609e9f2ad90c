"""One PostgreSQL to a million runs (`python -m benchmarks.million`, `make bench-million`; opt-in,
it takes many minutes and about 2 GB of disk).

In a database of its own on the bench server (`benchmarks.databases.bench_dsn`; created, then
dropped), 1,000,000 active runs (`benchmarks/million_workflow.py`), every one with a business
key: half `waiter` runs waiting for an event, half `timer` runs asleep on a durable timer, of
which 100,000 are due at one instant shortly after the load and the rest a day later.

How the runs get there: the store has no batched create (`RunStore.create_run` inserts one run
and its first step's rows in a transaction), so the first `--api-starts` runs are started one
by one through `Runtime.start` (its rate measured), and the rest are loaded by `COPY` into
`workflow_runs`, in transactions of 50,000 rows: for each batch, `Runtime.prepare_run` builds
the row `create_run` would insert (these workflows' starts write no other row), and every row
of the batch is that row with its own id, key and context (the machines' contexts are their
inputs). The benchmark checks that a copied row equals a started one of the same workflow in
every column but the id, key, times and context.

Measured:

- bytes per run: `pg_total_relation_size` of every table of the store (heap, TOAST and
  indexes) over the runs, per table and per index of `workflow_runs`, after the load and again
  at the end;
- claim latency: the store's `claim_work` (what a worker calls: 32 runs at most, the versions
  its runtime can step), p50/p99, with nothing due (1M active runs), with queued events (the
  runs sent an event by `send_event`, whose latency is measured too) and with timers due (a
  `now` a day ahead: the far timers all due);
- the drain: the 100,000 timers due at one instant, stepped by 4 worker processes (`statecharts
  worker`, the project's CLI); time from the instant until the last is done, and that each of
  them was stepped exactly once (version 2: created, one step) while no other run moved;
- plans: PostgreSQL's own (auto_explain, from the server log) for every statement the store ran
  on `workflow_runs` while a `Worker` in this process claimed and stepped due timers and queued
  events, `Runtime.send` stepped waiting runs and `Runtime.start` started runs, at 1M rows; the
  benchmark fails if a claim, step commit, send or start plan reads `workflow_runs` sequentially.

The results go to `benchmarks/million_results.json` (labelled with date, machine and load);
`python -m benchmarks.run --section million` puts them into their section of
docs/performance.md (`make bench-million` runs both; `make bench` rebuilds the section from the
JSON with the rest of the document).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.databases import bench_dsn, scratch_database, with_database

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "million_results.json"
DATABASE = "statecharts_million"
DAY_MS = 86_400_000
COPY_BATCH = 50_000
CLAIM_LIMIT = 32
LEASE_MS = 3_600_000  # the benchmark's own claims keep what they lease until the database goes
BYTES_PER_RUN_BUDGET = 4096  # refuse to start with less free disk than twice this per run
HOT = ("claim", "step commit", "send", "start")
SWEEP_CAP_S = 120


def main(argv: list[str] | None = None) -> None:
    """Command line: load, measure, write the results and the docs section."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1_000_000)
    ap.add_argument("--drain", type=int, default=100_000, help="timers due at one instant")
    ap.add_argument("--api-starts", type=int, default=2_000, help="runs started by Runtime.start")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2, help="threads per worker process")
    ap.add_argument("--batch", type=int, default=32, help="runs per worker thread per round")
    ap.add_argument("--claims", type=int, default=1_000, help="claims timed per case")
    ap.add_argument("--sends", type=int, default=16_000, help="events queued by send_event")
    ap.add_argument("--output", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    half = args.runs // 2
    if not 0 < args.drain <= half - args.api_starts // 2 or args.sends > half - args.api_starts:
        ap.error("need --drain <= runs/2 - api-starts/2 and --sends <= runs/2 - api-starts")
    from benchmarks.timing import machine_info

    report: dict[str, Any] = {"machine": machine_info(), "runs": args.runs, "drain": args.drain}
    started = time.time()
    with scratch_database(bench_dsn(), DATABASE) as url:
        report["disk"] = _disk_check(url, args.runs)
        measure(url, args, report)
    report["machine"]["load average at end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    report["when"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    report["seconds"] = round(time.time() - started)
    args.output.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(markdown(report))
    print(
        f"[million] wrote {args.output}; `python -m benchmarks.run --section million` puts it "
        "into docs/performance.md (`make bench-million` does both)",
        file=sys.stderr,
    )
    failed = check(report)
    if failed:
        raise SystemExit("[million] FAILED: " + "; ".join(failed))


def check(report: dict[str, Any]) -> list[str]:
    """What the run must show and did not (empty: all of it)."""
    failed = []
    drain = report.get("drain_result", {})
    if drain.get("stepped_once") != report["drain"]:
        failed.append(f"drain: {drain.get('stepped_once')} of {report['drain']} stepped once")
    if drain.get("margin_s", 0) <= 0:
        failed.append(f"the workers started {-drain.get('margin_s', 0)} s after the instant")
    if drain.get("others_moved"):
        failed.append(f"{drain['others_moved']} runs not due moved during the drain")
    plans = report.get("plans", {})
    if plans.get("note"):
        failed.append(plans["note"])
    for label in HOT:
        found = [p for p in plans.get("statements", []) if p["label"] == label]
        if not found:
            failed.append(f"no {label} statement captured")
        failed += [f"{label} reads workflow_runs sequentially" for p in found if p["runs_seq"]]
    return failed


def measure(url: str, args: argparse.Namespace, report: dict[str, Any]) -> None:
    """Every phase in turn, each writing its figures into `report`."""
    from benchmarks.million_workflow import MACHINES
    from persistence.runtime import Runtime
    from persistence.stores import open_store

    store = open_store(url, migrate=True)
    try:
        runtime = Runtime(store, MACHINES)
        far = _now() + DAY_MS
        waiters = load(url, runtime, args, far, report)
        report["size_loaded"] = sizes(url, args.runs)
        versions = runtime.steppable_versions()
        _say(f"timing {args.claims} claims with nothing due")
        report["claim_idle_ms"] = claims(store, _now, versions, args.claims, expect=0)
        report["drain_result"] = drain(url, args, report["due_at"])
        report["plans"] = plans(url, runtime, waiters[:200], far)
        _say(f"timing {args.claims} claims of due timers")
        # a day ahead (every far timer due), moving on as the clock does: a worker's claims
        # never share an instant, and the leases they set (due when they expire) differ
        report["claim_due_ms"] = claims(store, lambda: _now() + DAY_MS, versions, args.claims)
        report["send_ms"] = sends(store, waiters[200 : 200 + args.sends])
        report["inbox_autoanalysed"] = _autoanalysed(url, "workflow_inbox")
        report["sweep_ms"] = sweep(url)
        _say(f"timing {args.claims} claims of runs with queued events, then again analysed")
        report["claim_events_ms"] = claims(store, _now, versions, args.claims, release=True)
        _analyze(url, "workflow_inbox")
        report["sweep_analysed_ms"] = sweep(url)
        report["claim_events_analysed_ms"] = claims(
            store, _now, versions, args.claims, release=True
        )
        report["size_end"] = sizes(url, args.runs)
    finally:
        store.close()


# -- the load ------------------------------------------------------------------------------------


def load(
    url: str, runtime: Any, args: argparse.Namespace, far: int, report: dict[str, Any]
) -> list[str]:
    """Start `--api-starts` runs through `Runtime.start`, COPY the rest; the due instant of the
    drained timers into `report`. Returns the ids of the copied waiters (events go to them)."""
    half, api = args.runs // 2, args.api_starts // 2
    _say(f"starting {2 * api} runs through Runtime.start")
    began = time.monotonic()
    for i in range(api):
        runtime.start("waiter", {"order": i}, key=f"order-{i}")
        runtime.start("timer", {"due_at": far, "created": _now()}, key=f"timer-{i}")
    report["api_start_s"] = round(time.monotonic() - began, 2)
    report["api_starts"] = 2 * api
    began = time.monotonic()
    waiters = copy_runs(
        url, runtime, "waiter", range(api, half), "order", lambda i, now: {"order": i}
    )
    far_timers = range(api, half - args.drain)
    copy_runs(url, runtime, "timer", far_timers, "timer", lambda i, now: _due(far, now))
    copied = len(waiters) + len(far_timers)
    took = time.monotonic() - began
    # the drained timers go last, due a margin after their COPY ends: twice its expected time
    # (from the rate so far), then two minutes for the measurements before the drain
    expected = took * args.drain / max(copied, 1)
    due_at = _now() + int(2 * expected * 1000) + 120_000
    began = time.monotonic()
    copy_runs(url, runtime, "timer", range(args.drain), "drain", lambda i, now: _due(due_at, now))
    report["copy_s"] = round(took + time.monotonic() - began, 1)
    report["copied"] = copied + args.drain
    report["due_at"] = due_at
    _analyze(url)
    report["row_check"] = same_rows(url, [("order-0", f"order-{api}"), ("timer-0", "drain-0")])
    return waiters


def _due(due_at: int, now: int) -> dict[str, int]:
    """A timer's input: due at `due_at`, counted from `now` (never before it)."""
    return {"due_at": max(due_at, now), "created": now}


def copy_runs(
    url: str,
    runtime: Any,
    name: str,
    numbers: range,
    key: str,
    input_of: Callable[[int, int], dict[str, Any]],
) -> list[str]:
    """COPY a run of workflow `name` per number (key `{key}-{number}`), in transactions of
    `COPY_BATCH` rows; each row the one `Runtime.prepare_run` builds for the batch's first run,
    with its own id, key and context (= its input). The ids, in order."""
    import psycopg
    from psycopg.types.json import Jsonb

    ids = []
    _say(f"copying {len(numbers):,} {name} runs ({key})")
    with psycopg.connect(url) as conn:
        for first in range(numbers.start, numbers.stop, COPY_BATCH):
            now = _now()
            sample = input_of(first, now)
            row, outbox, _ = runtime.prepare_run(name, sample, f"{key}-{first}", now)
            if outbox or row.snapshot["context"] != sample:  # what the rows below rely on
                raise SystemExit(f"{name}: a start writes more than its run's row")
            with conn.cursor().copy(
                "COPY workflow_runs (id, workflow_name, workflow_version, key, state, snapshot, "
                "status, created_at, updated_at, wake_at) FROM STDIN"
            ) as copy:
                ts = _ts(now)
                wake = None if row.wake_at is None else _ts(row.wake_at)
                for i in range(first, min(first + COPY_BATCH, numbers.stop)):
                    run_id = str(uuid.uuid4())
                    ids.append(run_id)
                    snapshot = {**row.snapshot, "context": input_of(i, now)}
                    head = (run_id, name, row.workflow_version, f"{key}-{i}", row.state)
                    copy.write_row((*head, Jsonb(snapshot), row.status, ts, ts, wake))
            conn.commit()
    return ids


def same_rows(url: str, pairs: list[tuple[str, str]]) -> str:
    """Compare the rows of each pair of keys (a started run's, a copied one's of the same
    workflow) in every column but id, key, times, the snapshot's context and its timers' due
    times: "same", else what differs."""
    import psycopg

    strip = (
        "to_jsonb(r) - 'id' - 'key' - 'created_at' - 'updated_at' - 'updated_minute' - "
        "'wake_at' - 'snapshot' || jsonb_build_object('snapshot', r.snapshot - 'context' - "
        "'timers', 'timers', jsonb_path_query_array(r.snapshot, '$.timers[*].id'))"
    )
    found = []
    with psycopg.connect(url) as conn:
        for pair in pairs:
            rows = conn.execute(
                f"SELECT key, {strip} FROM workflow_runs r WHERE key = ANY(%s)", (list(pair),)
            ).fetchall()
            if len(rows) != 2:
                found.append(f"{pair}: {len(rows)} rows to compare")
                continue
            a, b = (row[1] for row in rows)
            differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            if differ:
                found.append(f"{pair}: {', '.join(differ)} differ")
    return "; ".join(found) or "same"


def _analyze(url: str, table: str = "") -> None:
    """ANALYZE the database (or one table), as autovacuum would after so many new rows."""
    import psycopg

    _say(f"ANALYZE {table}")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"ANALYZE {table}")


# -- sizes ----------------------------------------------------------------------------------------


def sizes(url: str, runs: int) -> dict[str, Any]:
    """Bytes of every table of the store (with its TOAST and indexes) and of each index of
    `workflow_runs`, and the total per run."""
    import psycopg

    with psycopg.connect(url) as conn:
        tables = conn.execute(
            "SELECT c.relname, pg_total_relation_size(c.oid), pg_relation_size(c.oid), "
            "pg_indexes_size(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = "
            "c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r' "
            "ORDER BY 2 DESC, 1"
        ).fetchall()
        indexes = conn.execute(
            "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index "
            "WHERE indrelid = 'workflow_runs'::regclass ORDER BY 2 DESC, 1"
        ).fetchall()
    total = sum(int(t[1]) for t in tables)
    return {
        "total": total,
        "per_run": round(total / runs, 1),
        "tables": [
            {"table": t[0], "total": int(t[1]), "heap": int(t[2]), "indexes": int(t[3])}
            for t in tables
        ],
        "runs_indexes": [{"index": i[0], "bytes": int(i[1])} for i in indexes],
    }


def _disk_check(url: str, runs: int) -> dict[str, Any]:
    """The free space where the server keeps its data (refuse below twice the budget)."""
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SHOW data_directory").fetchone()
    where = row[0] if row else "/"
    free = shutil.disk_usage(where).free if os.path.exists(where) else shutil.disk_usage("/").free
    need = 2 * BYTES_PER_RUN_BUDGET * runs
    _say(f"{free / 1e9:.1f} GB free at {where}; need {need / 1e9:.1f} GB")
    if free < need:
        raise SystemExit(f"only {free / 1e9:.1f} GB free at {where}, need {need / 1e9:.1f}")
    return {"free_gb": round(free / 1e9, 1), "where": where}


# -- claims and sends -----------------------------------------------------------------------------


def claims(
    store: Any,
    now: Callable[[], int],
    versions: set[tuple[str, str]],
    count: int,
    expect: int = CLAIM_LIMIT,
    *,
    release: bool = False,
) -> dict[str, Any]:
    """Time `count` calls of `claim_work` as a worker makes them; each must lease `expect` runs.
    With `release`, the runs leased are released after each (untimed), their events still
    queued: the next claim meets the same backlog, as it would if workers kept up."""
    owner = f"bench-{uuid.uuid4().hex[:8]}"
    times, got = [], []
    for _ in range(count):
        at = now()
        began = time.perf_counter()
        found = store.claim_work(owner, at, LEASE_MS, CLAIM_LIMIT, versions)
        times.append(time.perf_counter() - began)
        got.append(len(found))
        for run, _ in found if release else ():
            store.release(run.id, owner, None)
    wrong = sum(1 for n in got if n != expect)
    return {**percentiles(times), "calls": count, "leased": sum(got), "not_as_expected": wrong}


def sends(store: Any, run_ids: list[str]) -> dict[str, Any]:
    """Queue a `go` event for each run through `send_event`, timed."""
    _say(f"timing {len(run_ids):,} send_event calls")
    times = []
    for run_id in run_ids:
        began = time.perf_counter()
        store.send_event(run_id, {"type": "go"}, _now())
        times.append(time.perf_counter() - began)
    return {**percentiles(times), "calls": len(run_ids)}


def sweep(url: str, cap_s: int = SWEEP_CAP_S) -> float | str:
    """Milliseconds one `sweep_dead_letters` takes (a worker's report runs it every minute),
    from a store of its own whose sessions stop a statement after `cap_s` (its plan can grow
    with queued events times ended runs); the error's name if it was stopped."""
    import psycopg

    from persistence.stores import open_store

    with psycopg.connect(with_database(bench_dsn(), "postgres"), autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {DATABASE} SET statement_timeout = '{cap_s}s'")
    store = open_store(url)
    began = time.perf_counter()
    try:
        store.sweep_dead_letters(_now())
        return round((time.perf_counter() - began) * 1000, 1)
    except Exception as exc:  # stopped by the cap: say so, with what raised
        return f"stopped after {time.perf_counter() - began:.0f} s ({type(exc).__name__})"
    finally:
        store.close()
        with psycopg.connect(with_database(bench_dsn(), "postgres"), autocommit=True) as conn:
            conn.execute(f"ALTER DATABASE {DATABASE} RESET statement_timeout")


def _autoanalysed(url: str, table: str) -> bool:
    """Whether autovacuum has analysed `table` since the load's ANALYZE (its statistics then
    count the rows added since)."""
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT last_autoanalyze IS NOT NULL FROM pg_stat_user_tables WHERE relname = %s",
            (table,),
        ).fetchone()
    return bool(row and row[0])


def percentiles(seconds: list[float]) -> dict[str, float]:
    """p50 and p99 of timings, in milliseconds."""
    ordered = sorted(seconds)
    if not ordered:
        return {}

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000, 2)

    return {"p50": at(0.5), "p99": at(0.99)}


# -- the drain ------------------------------------------------------------------------------------


def drain(url: str, args: argparse.Namespace, due_at: int) -> dict[str, Any]:
    """Start the worker processes, wait for the instant, time until every drained timer is
    done, stop them and check what they wrote."""
    from benchmarks.load import process_cpu, start_workers, stop_workers

    logs = Path(tempfile.mkdtemp(prefix="million-"))
    options = ["--machines", "benchmarks.million_workflow", "--concurrency", str(args.threads)]
    options += ["--batch", str(args.batch), "--poll-ms", "100"]
    procs, _ = start_workers(url, options, args.workers, logs, {})
    result: dict[str, Any] = {"workers": args.workers, "threads": args.threads}
    result["batch"] = args.batch
    try:
        wait = due_at / 1000 - time.time()
        result["margin_s"] = round(wait, 1)
        _say(f"{args.workers} workers started; the timers are due in {wait:.0f} s")
        time.sleep(max(0.0, wait))
        result["drain_s"] = _until_done(url, due_at, args.drain)
        result["worker_cpu_s"] = round(sum(process_cpu(p.pid) for p in procs), 1)
    finally:
        stop_workers(procs)
    result["worker_errors"] = _errors(logs)
    result.update(_stepped(url))
    _say(f"drain: {result}")
    return result


def _until_done(url: str, due_at: int, count: int) -> float | None:
    """Seconds from the instant until `count` runs are done (None after 30 minutes)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        while time.time() * 1000 < due_at + 1_800_000:
            row = conn.execute(
                "SELECT count(*) FROM workflow_runs WHERE status = 'done'"
            ).fetchone()
            if row is not None and row[0] >= count:
                return round(time.time() - due_at / 1000, 1)
            time.sleep(0.5)
    return None


def _stepped(url: str) -> dict[str, int]:
    """How the drained timers ended (done at version 2: stepped exactly once) and how many other
    runs moved at all (any version, claim or status change)."""
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE d AND status = 'done' AND version = 2 AND "
            "snapshot->'context'->>'fired' = 'true'), count(*) FILTER (WHERE d AND status = "
            "'done'), count(*) FILTER (WHERE d AND claim_count = 1), coalesce(max(claim_count) "
            "FILTER (WHERE d), 0), count(*) FILTER (WHERE NOT d AND (version <> 1 OR "
            "claim_count <> 0 OR status <> 'active')) FROM (SELECT *, key LIKE 'drain-%%' AS d "
            "FROM workflow_runs) r"
        ).fetchone()
    assert row is not None
    keys = ("stepped_once", "done", "claimed_once", "max_claims", "others_moved")
    return dict(zip(keys, (int(v) for v in row), strict=True))


def _errors(logs: Path) -> list[str]:
    """The first lines of the workers' stderr that report an error or a traceback."""
    lines = [
        line
        for path in sorted(logs.glob("*.err"))
        for line in path.read_text(errors="replace").splitlines()
        if "ERROR" in line or "Traceback" in line
    ]
    return lines[:5]


# -- plans ----------------------------------------------------------------------------------------


def plans(url: str, runtime: Any, waiters: list[str], far: int) -> dict[str, Any]:
    """The plans of the store's statements on `workflow_runs` at this size (auto_explain into
    the server log), while this process does what workers and clients do: timers due, events
    queued, both claimed and stepped by a `Worker`, `Runtime.send` stepping waiting runs,
    `Runtime.start` starting runs, idle claims, and the worker's periodic reports."""
    from benchmarks.durable_scaling import (
        explain_in_database,
        log_since,
        logged_plans,
        render_plan,
        server_log,
    )

    log = server_log()
    if log is None:
        return {"note": "server log not readable here: plans not captured", "statements": []}
    _say("capturing plans (auto_explain)")
    offset = log.stat().st_size
    explain_in_database(url, DATABASE, on=True)
    try:
        _plan_workload(url, runtime, waiters, far)
    finally:
        explain_in_database(url, DATABASE, on=False)
    time.sleep(0.5)  # (the server writes its log asynchronously to us)
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for query, plan, took in logged_plans(log_since(log, offset), DATABASE):
        # one entry per statement and plan shape: the literals of a custom plan folded
        rendered = re.sub(r"'[^']*'", "'…'", render_plan(plan))
        entry = found.setdefault(
            (query, rendered),
            {"label": label(query), "query": query, "plan": rendered, "times": 0, "ms": []},
        )
        entry["times"] += 1
        entry["ms"].append(took)
        entry["seq_scans"] = sorted(seq_scanned(plan))
        entry["runs_seq"] = "workflow_runs" in entry["seq_scans"]
    for entry in found.values():
        entry["median_ms"] = round(sorted(entry.pop("ms"))[entry["times"] // 2], 3)
    return {"note": "", "statements": sorted(found.values(), key=_plan_order)}


def _plan_workload(url: str, runtime: Any, waiters: list[str], far: int) -> None:
    """What the plans are captured over (a new store: its sessions load auto_explain)."""
    from benchmarks.million_workflow import MACHINES
    from persistence.runtime import Runtime
    from persistence.stores import open_store
    from persistence.worker import Worker

    store = open_store(url)
    try:
        rt = Runtime(store, MACHINES)
        worker = Worker(rt, batch=CLAIM_LIMIT)
        versions = rt.steppable_versions()
        for _ in range(40):  # enough for psycopg to prepare it and the server to go generic
            store.claim_work("bench-idle", _now(), LEASE_MS, CLAIM_LIMIT, versions)
        for n in range(64):
            rt.start("timer", _due(_now(), _now()), key=f"plan-{n}")
        for run_id in waiters[:100]:
            store.send_event(run_id, {"type": "go"}, _now())
        worker.run_until_idle()
        for run_id in waiters[100:]:
            rt.send(run_id, "go")
        store.claim_work("bench-far", far + 1, LEASE_MS, CLAIM_LIMIT, versions)
        rt.stuck(limit=20)
        rt.unknown_versions()
        store.sweep_dead_letters(_now())
    finally:
        store.close()


def label(query: str) -> str:
    """Which of the store's statements a logged query is."""
    q = query.upper()
    if "FOR UPDATE SKIP LOCKED" in q:
        return "claim"
    if "INSERT INTO WORKFLOW_INBOX" in q:
        return "send"
    if "INSERT INTO WORKFLOW_RUNS" in q:
        return "start"
    if "FOR NO KEY UPDATE" in q:
        return "row lock"
    if "UPDATE WORKFLOW_RUNS" in q and "VERSION" in q:
        return "step commit"
    return "other"


def _plan_order(entry: dict[str, Any]) -> tuple[int, str]:
    order = {name: n for n, name in enumerate(HOT)}
    return (order.get(entry["label"], len(HOT)), entry["query"])


def seq_scanned(plan: dict[str, Any]) -> set[str]:
    """The relations a plan reads by sequential scan."""
    found = {str(plan.get("Relation Name"))} if plan.get("Node Type") == "Seq Scan" else set()
    for child in plan.get("Plans", []):
        found |= seq_scanned(child)
    return found


# -- helpers --------------------------------------------------------------------------------------


def _now() -> int:
    return int(time.time() * 1000)


def _ts(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)


def _say(text: str) -> None:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"[million {time.strftime('%H:%M:%S')} load {load}] {text}", file=sys.stderr, flush=True)


# -- the docs section -----------------------------------------------------------------------------


def cached_markdown(path: Path = RESULTS) -> str:
    """The section from the last run's results, or how to get them."""
    if not path.exists():
        return "No results yet: run `make bench-million` (about 20 minutes).\n"
    return markdown(json.loads(path.read_text(encoding="utf-8")))


def markdown(report: dict[str, Any]) -> str:
    """The section of docs/performance.md, from a report (`million_results.json`)."""
    return "\n".join(
        [_headline(report), _size_table(report), _plans_section(report.get("plans", {}))]
    )


def _ms(figures: dict[str, Any]) -> str:
    return f"{figures.get('p50', '—')} / {figures.get('p99', '—')}"


def _headline(r: dict[str, Any]) -> str:
    m, d = r["machine"], r.get("drain_result", {})
    drain_s = d.get("drain_s")
    rate = f"{r['drain'] / drain_s:,.0f} runs/s" if drain_s else "not in 30 min"
    api_rate = r["api_starts"] / max(r["api_start_s"], 1e-9)
    size = r["size_loaded"]
    return f"""Cached figures from `python -m benchmarks.million` (`make bench-million`) of \
{r["when"]}, {r["seconds"]} s in all; machine: {m.get("cpu")}, {m.get("cores")} cores, \
{m.get("postgresql client", "PostgreSQL")}; load average {m.get("load average at start")} at \
the start and {m.get("load average at end")} at the end (the machine was shared with other \
work: read the times as an order of magnitude).

{r["runs"]:,} active runs, every one with a business key: {r["runs"] // 2:,} waiting for an \
event, {r["runs"] - r["runs"] // 2:,} asleep on a timer ({r["drain"]:,} of them due at one \
instant after the load, the rest a day later). {r["api_starts"]:,} were started through \
`Runtime.start` one at a time ({api_rate:,.0f} runs/s; the store has no batched create), the \
other {r["copied"]:,} loaded by COPY of the row `Runtime.prepare_run` builds \
({r["copy_s"]} s; copied and started rows compared: {r["row_check"]}).

| measure | figure |
|---|---|
| bytes per run, all tables and indexes, after the load | {size["per_run"]:,.0f} \
({size["total"] / 1e9:.2f} GB) |
| bytes per run at the end (after the drain and the claims below) | \
{r["size_end"]["per_run"]:,.0f} |
| claim, nothing due (ms, p50 / p99) | {_ms(r["claim_idle_ms"])} |
| claim, {r["send_ms"]["calls"]:,} runs with an event queued (ms, p50 / p99; {CLAIM_LIMIT} \
leased per claim): the inbox's statistics as autovacuum left them / after `ANALYZE \
workflow_inbox` | {_ms(r["claim_events_ms"])} / {_ms(r["claim_events_analysed_ms"])} |
| claim, timers due ({r["runs"] // 2 - r["drain"]:,} of them; ms, p50 / p99; {CLAIM_LIMIT} \
per claim) | {_ms(r["claim_due_ms"])} |
| `send_event` (ms, p50 / p99) | {_ms(r["send_ms"])} |
| a worker's sweep of dead letters (`sweep_dead_letters`) with those events queued and \
{r["drain"]:,} ended runs (ms, once; stopped at {SWEEP_CAP_S} s): as autovacuum left the \
inbox's statistics / analysed | \
{r.get("sweep_ms", "—")} / {r.get("sweep_analysed_ms", "—")} |
| drain of {r["drain"]:,} timers due at once, {d.get("workers")} worker processes x \
{d.get("threads")} threads (batch {d.get("batch")}) | {drain_s} s ({rate}) |
| drained runs stepped exactly once / done / claimed once | {d.get("stepped_once"):,} / \
{d.get("done"):,} / {d.get("claimed_once"):,} (most claims of one run: {d.get("max_claims")}) |
| other runs that moved during the drain | {d.get("others_moved")} |
| workers' CPU during the drain | {d.get("worker_cpu_s")} s |

Claims are the store's `claim_work` as a worker calls it (at most {CLAIM_LIMIT} runs, the \
versions its runtime steps), {r["claim_idle_ms"]["calls"]:,} timed per case from one thread, \
after the drain but for "nothing due", in the order of the table. The runs leased by a claim \
of runs with events are released after it (untimed), their events still queued, so every claim \
meets the same backlog; \
"timers due" passes a `now` a day ahead of the clock, so every far timer is due. `send_event` \
queues an event (one transaction). Autovacuum had analysed the inbox after the sends: \
{_yes(r.get("inbox_autoanalysed"))}. "Stepped exactly once": \
done at version 2 (created, then one step) with the step's `fired` in its context. The \
workers started {d.get("margin_s")} s before the instant.
"""


def _yes(value: object) -> str:
    return "—" if value is None else ("yes" if value else "no")


def _size_table(r: dict[str, Any]) -> str:
    runs, size = r["runs"], r["size_loaded"]
    rows = [
        f"| {t['table']} | {t['total'] / runs:,.1f} | {t['heap'] / runs:,.1f} | "
        f"{t['indexes'] / runs:,.1f} |"
        for t in size["tables"]
        if t["total"] >= runs  # (tables of a few empty pages are left out)
    ]
    indexes = [f"| {i['index']} | {i['bytes'] / runs:,.1f} |" for i in size["runs_indexes"]]
    return (
        "Bytes per run after the load, by table (`pg_total_relation_size`: heap, TOAST and "
        "indexes; tables under a byte per run left out):\n\n| table | total | heap | indexes |\n"
        "|---|---:|---:|---:|\n" + "\n".join(rows) + "\n\nAnd by index of `workflow_runs`:\n\n"
        "| index | bytes per run |\n|---|---:|\n" + "\n".join(indexes) + "\n"
    )


def _plans_section(p: dict[str, Any]) -> str:
    if p.get("note"):
        return f"Plans: {p['note']}.\n"
    statements = p.get("statements", [])
    rows = [
        f"| {s['label']} | {s['times']} | {s.get('median_ms', '—')} | "
        f"{', '.join(s['seq_scans']) or 'none'} | `{s['query'][:90]}...` |"
        for s in statements
    ]
    hot_seq = [s for s in statements if s["label"] in HOT and s["runs_seq"]]
    verdict = (
        "No claim, step commit, send or start plan reads `workflow_runs` sequentially."
        if not hot_seq
        else f"**{len(hot_seq)} hot statement(s) read `workflow_runs` sequentially.**"
    )
    details = "\n".join(
        f"```text\n[{s['label']}] {s['query']}\n\n{s['plan']}\n```\n" for s in statements
    )
    return f"""PostgreSQL's plans at this size (auto_explain) of every statement the store ran on \
`workflow_runs` while a `Worker` claimed and stepped due timers and queued events, \
`Runtime.send` stepped waiting runs, `Runtime.start` started runs, idle claims ran 40 times \
on pooled connections (long enough for prepared statements' generic plans) and the worker's \
reports ran; one row per distinct statement and plan, with the server's own time for it (the \
statement's duration in the log: no network, no client). The timer scan is the claim's `due` \
branch (a run's timer is its `wake_at`). {verdict}

| statement | executions | server ms (median) | sequential scans | query |
|---|---:|---:|---|---|
{chr(10).join(rows)}

<details><summary>The plans</summary>

{details}</details>
"""


if __name__ == "__main__":
    main()
