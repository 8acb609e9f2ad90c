"""Takeover: time from a worker's SIGKILL to another worker finishing the runs it held.

Worker A (a subprocess) claims ``runs`` one-step runs whose step hangs in A; once A holds a lease
on every one of them, worker B (another subprocess) starts, A is SIGKILLed, and the clock runs
until B has finished them all (B re-runs each in-flight step under its idempotency key). Expect
about ``lease_ms`` plus B's polling: a lease must expire before anyone may take a run over.
Run: ``python -m benchmarks.takeover [--store URL] [--lease-ms 2000]``; the worker side is
``python -m benchmarks.takeover --worker --store URL ...``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WORKFLOW = "takeover"
HANG_ENV = "STATECHARTS_BENCH_HANG"  # set in worker A: its steps never finish
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Takeover:
    """One measurement (``seconds`` is None when it could not run; ``note`` says why)."""

    store: str
    runs: int
    lease_ms: int
    seconds: float | None
    note: str = ""


def step(x: int) -> int:
    """The workflow's only step: hangs in the worker that is about to be killed."""
    if os.environ.get(HANG_ENV):
        time.sleep(3600)
    return x


def machine() -> Any:
    """One invoked step, then done."""
    from statecharts import create_machine

    return create_machine(
        {
            "id": WORKFLOW,
            "initial": "working",
            "context": lambda input: {"x": input["x"]},
            "states": {
                "working": {
                    "invoke": {
                        "id": "step",
                        "src": "step",
                        "input": lambda context, event: context["x"],
                        "onDone": "finished",
                    }
                },
                "finished": {"type": "final"},
            },
        },
        actors={"step": step},
    )


def worker_main(store_url: str, concurrency: int, lease_ms: int) -> None:
    """The worker subprocess: serve until killed or SIGTERM."""
    from persistence import open_store
    from persistence.runtime import Runtime
    from persistence.worker import Worker

    store = open_store(store_url)
    Worker(
        Runtime(store, machines=[machine()]), concurrency=concurrency, lease_ms=lease_ms, poll_ms=20
    ).run()


def _spawn(store_url: str, concurrency: int, lease_ms: int, hang: bool) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    if hang:
        env[HANG_ENV] = "1"
    else:
        env.pop(HANG_ENV, None)
    argv = [
        sys.executable,
        "-m",
        "benchmarks.takeover",
        "--worker",
        "--store",
        store_url,
        "--concurrency",
        str(concurrency),
        "--lease-ms",
        str(lease_ms),
    ]
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _held(store: Any, run_id: str) -> bool:
    """Whether `run_id`'s hanging step is held by a worker: its call beside the run (leased to
    that worker's call executor), or the run itself while it runs an in-step effect."""
    return bool(store.get_run(run_id).lease_owner) or any(
        c.status == "running" for c in store.list_calls(run_id)
    )


def _wait(what: str, done: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.01)


def measure(store_url: str, runs: int = 4, lease_ms: int = 2_000) -> Takeover:
    """One takeover on ``store_url`` (a fresh store: it must be empty of other active runs)."""
    try:
        from persistence import open_store
        from persistence.runtime import Runtime
    except ImportError as exc:
        return Takeover(store_url, runs, lease_ms, None, f"skipped: persistence ({exc})")
    store = open_store(store_url, migrate=True)
    runtime = Runtime(store, machines=[machine()])
    ids = [runtime.start(WORKFLOW, input={"x": i}) for i in range(runs)]
    a = _spawn(store_url, runs, lease_ms, hang=True)
    b: subprocess.Popen[bytes] | None = None
    try:
        _wait(
            "worker A to hold every run's call (calls run beside their runs)",
            lambda: all(_held(store, i) for i in ids),
            60,
        )
        b = _spawn(store_url, runs, lease_ms, hang=False)
        time.sleep(1.0)  # B is up and polling (its imports are not part of the takeover)
        assert all(runtime.get(i).status == "active" for i in ids), "B took runs A still held"
        killed = time.perf_counter()
        a.send_signal(signal.SIGKILL)
        _wait(
            "worker B to finish the runs",
            lambda: all(runtime.get(i).status == "done" for i in ids),
            60 + lease_ms / 1000,
        )
        seconds = time.perf_counter() - killed
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        store.close()
    return Takeover(store_url.split("?")[0].split("://")[0], runs, lease_ms, seconds)


def run(lease_ms: int = 2_000) -> list[Takeover]:
    """Takeover on a fresh SQLite file and on PostgreSQL (database of its own)."""
    from benchmarks.databases import bench_dsn, reset_database, with_database

    results = []
    with tempfile.TemporaryDirectory(prefix="statecharts-takeover-") as tmp:
        results.append(measure(f"sqlite:///{Path(tmp) / 'runs.db'}", lease_ms=lease_ms))
    database = "statecharts_bench_takeover"
    try:
        import psycopg

        reset_database(bench_dsn(), database)
        with psycopg.connect(with_database(bench_dsn(), "postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {database}")
    except Exception as exc:  # no PostgreSQL here: say so
        results.append(Takeover("postgresql", 0, lease_ms, None, f"skipped: {exc}"))
        return results
    try:
        results.append(measure(with_database(bench_dsn(), database), lease_ms=lease_ms))
    finally:
        reset_database(bench_dsn(), database)
    return results


def markdown(results: list[Takeover]) -> str:
    """The takeover table."""
    lines = [
        "| store | runs held by the killed worker | lease | SIGKILL → all finished by "
        "another worker | note |",
        "|---|---:|---:|---:|---|",
    ]
    for r in results:
        took = "—" if r.seconds is None else f"{r.seconds:.2f} s"
        lines.append(f"| {r.store} | {r.runs} | {r.lease_ms / 1000:g} s | {took} | {r.note} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Command line: measure takeovers, or (``--worker``) be a worker."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--store", default="")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--lease-ms", type=int, default=2_000)
    args = ap.parse_args(argv)
    if args.worker:
        worker_main(args.store, args.concurrency, args.lease_ms)
        return
    if args.store:
        print(markdown([measure(args.store, lease_ms=args.lease_ms)]))
    else:
        print(markdown(run(args.lease_ms)))


if __name__ == "__main__":
    main()
