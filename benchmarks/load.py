"""The thundering herd: 100,000 runs on PostgreSQL whose timers are due at one instant, drained
by 4 worker processes (`python -m benchmarks.load`, `make load`; opt-in, it takes minutes).

Two scenarios, each on a fresh schema of a dedicated database (created, then dropped):

- **no limit**: every run wakes at the instant, calls the fake downstream once and ends;
- **limit of 4**: the same, but the call goes through `limit: "downstream"` with
  `Limit(max_in_flight=4)`: runs queue for a slot (waiting durably, released, not in a thread).

Measured: time to drain (from the due instant until no run is active), how late each run's
call started after the instant (exact, from the downstream's own log) and the workers' claim
lag (their `statecharts_claim_lag_seconds` histograms, so bucket bounds), that no run fired
early or twice (the downstream's log), the most calls the downstream had in flight at once,
the CPU time of the database's backends for this database (from /proc) and of the workers, and
the rows `workflow_runs` read per claim (pg_stat_user_tables: sequential tuples read plus index
tuples fetched, over every statement on that table, divided by the claims made; an upper bound
on what the claim itself reads, as pg_stat_statements is not loaded).

The runs are inserted with one COPY of the row `Runtime.start` would write (the same snapshot
for every run: same input, same instant), so that setting up 100,000 runs takes seconds. The
results go to `benchmarks/load_results.json` (a cache, labelled with its date and machine);
`python -m benchmarks.run` writes them into docs/performance.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "load_results.json"
DATABASE = "statecharts_load30"
SCENARIOS = (
    ("no limit", "herd", "load_plain"),
    ("limit of 4 in flight", "limited_herd", "load_limited"),
)
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class Scenario:
    """One scenario's figures (None where it could not be measured)."""

    name: str
    runs: int
    workers: int
    threads: int
    batch: int
    insert_s: float = 0.0
    drain_s: float | None = None
    fire_lag_s: dict[str, float] = field(default_factory=dict)
    claim_lag_s: dict[str, str] = field(default_factory=dict)
    calls: int = 0
    fired_early: int = 0
    fired_twice: int = 0
    never_fired: int = 0
    max_in_flight: int = 0
    claims: int = 0
    handed_over: int = 0
    db_cpu_s: float = 0.0
    worker_cpu_s: float = 0.0
    runs_rows_read: int = 0
    runs_seq_scans: int = 0
    not_done: int = 0


def main(argv: list[str] | None = None) -> None:
    """Command line: run both scenarios, write the cache, print the markdown."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2, help="threads per worker process")
    ap.add_argument("--batch", type=int, default=32, help="runs per thread per round")
    ap.add_argument(
        "--dsn",
        default=os.environ.get("STATECHARTS_TEST_DSN", "postgresql://localhost/test"),
        help="a PostgreSQL server to create the load test's database on",
    )
    ap.add_argument("--only", default="", help="one scenario name (e.g. 'no limit')")
    ap.add_argument("--output", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    from benchmarks.timing import machine_info

    info = machine_info()
    started = time.time()
    results = []
    with _database(args.dsn) as url:
        for name, workflow, schema in SCENARIOS:
            if args.only and args.only != name:
                continue
            results.append(run_scenario(name, workflow, f"{url}?schema={schema}", args))
    info["load average at end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    report = {
        "when": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": round(time.time() - started),
        "machine": info,
        "scenarios": [asdict(r) for r in results],
    }
    args.output.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(markdown(report))
    print(f"[load] wrote {args.output}", file=sys.stderr)


class _database:
    """A dedicated database on the server of `dsn`, dropped afterwards."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def __enter__(self) -> str:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {DATABASE}")
        base = self.dsn.rsplit("/", 1)[0]
        return f"{base}/{DATABASE}"

    def __exit__(self, *exc: object) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")


def run_scenario(name: str, workflow: str, url: str, args: argparse.Namespace) -> Scenario:
    """Insert the runs, start the workers, wait for the drain, measure."""
    from benchmarks.load_workflow import LOG_ENV

    result = Scenario(name, args.runs, args.workers, args.threads, args.batch)
    print(f"[load] {name}: inserting {args.runs} runs", file=sys.stderr, flush=True)
    began = time.monotonic()
    due_at = _insert(url, workflow, args.runs)
    result.insert_s = round(time.monotonic() - began, 1)
    logs = Path(tempfile.mkdtemp(prefix="load30-"))
    options = [
        "--machines",
        "benchmarks.load_workflow",
        "--limits",
        "benchmarks.load_workflow",
        "--concurrency",
        str(args.threads),
        "--batch",
        str(args.batch),
        "--poll-ms",
        "100",
    ]
    procs, ports = start_workers(url, options, args.workers, logs, {LOG_ENV: str(logs)})
    try:
        wait = due_at / 1000 - time.time()
        print(f"[load] {name}: workers started; due in {wait:.1f} s", file=sys.stderr, flush=True)
        time.sleep(max(0.0, wait))
        db_cpu, stats = _db_cpu(), _table_stats(url)
        result.drain_s = _drain(url, logs, due_at, args.runs)
        result.db_cpu_s = round(_db_cpu() - db_cpu, 1)
        result.worker_cpu_s = round(sum(process_cpu(p.pid) for p in procs), 1)
        result.claim_lag_s, claimed = _claim_lag(ports)
    finally:
        stop_workers(procs)
    time.sleep(1.5)  # the backends' table statistics are flushed when their sessions end
    after = _table_stats(url)
    result.runs_rows_read = after[0] + after[1] - stats[0] - stats[1]
    result.runs_seq_scans = after[2] - stats[2]
    result.claims, result.not_done = _claims(url)
    # every lease counts in claim_count; the claim statement's runs are in the claim-lag
    # histograms, the rest were leased with no claim statement (a step that folded its claim
    # into its commit; results of earlier designs: a release handing its slot over)
    result.handed_over = max(0, result.claims - claimed) if claimed else 0
    _calls(result, logs, due_at)
    print(f"[load] {name}: {result}", file=sys.stderr, flush=True)
    return result


def start_workers(
    url: str, options: list[str], count: int, logs: Path, env: dict[str, str]
) -> tuple[list[subprocess.Popen[bytes]], list[int]]:
    """`count` worker processes (`persistence.cli worker --store url` and `options`), each
    serving Prometheus metrics on a port of its own and writing its stderr into `logs`, with
    `env` added to this process's environment; the processes and their ports."""
    ports = [_free_port() for _ in range(count)]
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    command = [sys.executable, "-m", "persistence.cli", "worker", "--store", url, *options]
    command += ["--log-level", "WARNING", "--metrics-refresh-s", "3600"]
    procs = [
        subprocess.Popen(
            [*command, "--metrics-port", str(port)],
            cwd=ROOT,
            env=full_env,
            stderr=(logs / f"worker-{port}.err").open("wb"),
        )
        for port in ports
    ]
    return procs, ports


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM the workers (they finish the steps in progress), SIGKILL any still up after 60 s."""
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()


def _insert(url: str, workflow: str, runs: int) -> int:
    """COPY `runs` rows of `workflow`, each the row `Runtime.start` writes, due at one instant
    (chosen so that the insert is over before it); return the instant (epoch ms)."""
    import psycopg
    from psycopg.types.json import Jsonb

    from benchmarks.load_workflow import LIMITS, MACHINES
    from persistence.runtime import Runtime
    from persistence.stores import open_store
    from persistence.stores.postgres import to_ts

    store = open_store(url, migrate=True)
    try:
        runtime = Runtime(store, MACHINES, limits=LIMITS)
        now = int(time.time() * 1000)
        due_at = now + 20_000 + runs // 10  # 100,000 runs: 30 s to insert and start workers
        row, _, _ = runtime.prepare_run(workflow, {"due_at": due_at, "created": now}, None, now)
    finally:
        store.close()
    assert row.wake_at == due_at, (row.wake_at, due_at)
    dsn, schema = url.split("?schema=")
    with psycopg.connect(dsn, options=f"-c search_path={schema}") as conn:
        with conn.cursor().copy(
            "COPY workflow_runs (id, workflow_name, workflow_version, state, snapshot, status, "
            "created_at, updated_at, wake_at) FROM STDIN"
        ) as copy:
            snapshot, ts, wake = Jsonb(row.snapshot), to_ts(now), to_ts(due_at)
            for _ in range(runs):
                copy.write_row(
                    (
                        str(uuid.uuid4()),
                        row.workflow_name,
                        row.workflow_version,
                        row.state,
                        snapshot,
                        "active",
                        ts,
                        ts,
                        wake,
                    )
                )
        conn.execute("ANALYZE workflow_runs")
    if time.time() * 1000 > due_at - 3000:
        raise SystemExit("inserting the runs took too long; the instant has passed")
    return due_at


def _drain(url: str, logs: Path, due_at: int, runs: int) -> float | None:
    """Seconds from the due instant until no run is active (None after 30 minutes). Followed
    through the downstream's logs (every run calls it once), then one count of the runs still
    active, so that watching adds no scans of `workflow_runs` to the figures."""
    import psycopg

    dsn, schema = url.split("?schema=")
    while time.time() * 1000 < due_at + 1_800_000:
        if sum(p.read_bytes().count(b"\n") for p in logs.glob("calls-*.log")) >= runs:
            with psycopg.connect(dsn, autocommit=True, options=f"-c search_path={schema}") as conn:
                row = conn.execute(
                    "SELECT count(*) FROM workflow_runs WHERE status = 'active'"
                ).fetchone()
            if row is not None and row[0] == 0:
                return round(time.time() - due_at / 1000, 1)
        time.sleep(0.25)
    return None


def _table_stats(url: str) -> tuple[int, int, int]:
    """workflow_runs' (seq_tup_read, idx_tup_fetch, seq_scan) in the scenario's schema."""
    import psycopg

    dsn, schema = url.split("?schema=")
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(seq_tup_read, 0), coalesce(idx_tup_fetch, 0), "
            "coalesce(seq_scan, 0) FROM pg_stat_user_tables WHERE schemaname = %s AND "
            "relname = 'workflow_runs'",
            (schema,),
        ).fetchone()
    return (int(row[0]), int(row[1]), int(row[2])) if row else (0, 0, 0)


def _claims(url: str) -> tuple[int, int]:
    """(claims made, runs not done)."""
    import psycopg

    dsn, schema = url.split("?schema=")
    with psycopg.connect(dsn, autocommit=True, options=f"-c search_path={schema}") as conn:
        row = conn.execute(
            "SELECT coalesce(sum(claim_count), 0), count(*) FILTER (WHERE "
            "status <> 'done') FROM workflow_runs"
        ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def _calls(result: Scenario, logs: Path, due_at: int) -> None:
    """What the downstream saw: calls per run, how late, how many at once."""
    per_run: dict[str, int] = {}
    lags: list[float] = []
    edges: list[tuple[int, int]] = []
    for path in logs.glob("calls-*.log"):
        for line in path.read_text().splitlines():
            run_id, start, end = line.split()
            per_run[run_id] = per_run.get(run_id, 0) + 1
            lags.append(int(start) / 1e9 - due_at / 1000)
            edges += [(int(start), 1), (int(end), -1)]
    result.calls = len(lags)
    result.fired_early = sum(1 for lag in lags if lag < 0)
    result.fired_twice = sum(1 for n in per_run.values() if n > 1)
    result.never_fired = result.runs - len(per_run)
    lags.sort()
    if lags:
        result.fire_lag_s = {
            p: round(lags[min(len(lags) - 1, int(len(lags) * q))], 2)
            for p, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0))
        }
    current = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):
        current += step
        result.max_in_flight = max(result.max_in_flight, current)


def _claim_lag(ports: list[int]) -> tuple[dict[str, str], int]:
    """p50/p95/p99 of the workers' claim-lag histograms summed (the bucket each falls in), and
    the runs they counted (those leased by the claim statement)."""
    buckets: dict[float, float] = {}
    counted = 0
    for port in ports:
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read()
        except OSError:
            continue
        for line in text.decode().splitlines():
            if line.startswith("statecharts_claim_lag_seconds_count"):
                counted += int(float(line.rsplit(" ", 1)[1]))
            if line.startswith("statecharts_claim_lag_seconds_bucket{"):
                le = line.split('le="', 1)[1].split('"', 1)[0]
                bound = float("inf") if le == "+Inf" else float(le)
                buckets[bound] = buckets.get(bound, 0.0) + float(line.rsplit(" ", 1)[1])
    if not buckets:
        return {}, counted
    total = buckets[max(buckets)]
    found = {}
    for p, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
        bound = next(b for b in sorted(buckets) if buckets[b] >= q * total)
        found[p] = f"≤ {bound:g}" if bound != float("inf") else "> 3600"
    return found, counted


def _db_cpu() -> float:
    """CPU seconds of the server processes serving the load test's database (from /proc)."""
    total = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.startswith(b"postgres:") and DATABASE.encode() in cmdline:
            total += process_cpu(int(pid))
    return total


def process_cpu(pid: int) -> float:
    """User plus system CPU seconds of process `pid` (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _handed(s: dict[str, Any]) -> str:
    """The share of the leases taken by no claim statement."""
    handed = s.get("handed_over", 0)
    return f" ({handed / max(s['runs'], 1):.2f} without a claim)" if handed else ""


def _unfinished(s: dict[str, Any]) -> str:
    """The drain cell of a scenario stopped at the 30-minute cap."""
    return f"not in 30 min: {s['runs'] - s['not_done']:,} of {s['runs']:,} done"


def cached_markdown(path: Path = RESULTS) -> str:
    """The section from the last run's results (`make load` writes them), or how to get them."""
    if not path.exists():
        return "No results yet: run `make load` (about 15 minutes), then `make bench`.\n"
    return markdown(json.loads(path.read_text(encoding="utf-8")))


def markdown(report: dict[str, Any]) -> str:
    """The section of docs/performance.md, from a report (`load_results.json`)."""
    machine = report["machine"]
    rows = []
    for s in report["scenarios"]:
        drain = s["drain_s"]
        rate = f"{s['runs'] / drain:,.0f}" if drain else "—"
        lag, claim = s["fire_lag_s"], s["claim_lag_s"]
        rows.append(
            f"| {s['name']} | {s['runs']:,} | {s['workers']} x {s['threads']} (batch "
            f"{s['batch']}) | {drain if drain is not None else _unfinished(s)} | {rate} | "
            f"{lag.get('p50', '—')} / {lag.get('p95', '—')} / {lag.get('p99', '—')} / "
            f"{lag.get('max', '—')} | {claim.get('p50', '—')} / {claim.get('p99', '—')} | "
            f"{s['fired_early']} / {s['fired_twice']} / {s['never_fired']} | "
            f"{s['max_in_flight']} | {s['db_cpu_s']} | {s['worker_cpu_s']} | "
            f"{s['claims'] / max(s['runs'], 1):.2f}{_handed(s)} | "
            f"{s['runs_rows_read'] / max(s['claims'], 1):.1f} |"
        )
    return f"""Cached figures from `python -m benchmarks.load` (`make load`) of {report["when"]}, \
{report["seconds"]} s in all; machine: {machine.get("cpu")}, {machine.get("cores")} cores, \
{machine.get("postgresql client", "PostgreSQL")}; load average {
        machine.get("load average at start")
    } at the start and {machine.get("load average at end")} at the \
end (the machine was shared with other work: read the times as an order of magnitude).

| scenario | runs | workers x threads | drain (s) | runs/s | call lag after the instant \
p50 / p95 / p99 / max (s) | claim lag p50 / p99 (s, bucket) | early / twice / never | max in \
flight | DB CPU (s) | workers' CPU (s) | claims per run | workflow_runs rows read per claim |
|---|---|---|---|---|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

"early / twice / never": runs whose call the downstream saw start before the instant, more \
than once, or not at all (all must be 0). "max in flight": the most calls the downstream had \
running at one instant (the limit must hold it to 4). "claims per run" counts every lease of a \
run (`claim_count`). A limited run's call waits beside it (queued and released, no run held) \
and is claimed by a call executor once a freed slot is reserved for it and it is woken: the \
run is not leased again for it. Rows read per claim \
counts every statement on `workflow_runs` (commits, capacity checks), so it bounds what the \
claim reads from above.
"""


if __name__ == "__main__":
    main()
