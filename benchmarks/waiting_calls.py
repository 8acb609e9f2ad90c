"""Many runs waiting on slow calls in one worker process: this project against DBOS Transact.

The work, the same on both sides: ``n`` workflows, each awaiting one async call that sleeps
``call_s`` (1 s) and returns its input, then ending with it as its output. Both run on the
same PostgreSQL server (``benchmarks.databases.bench_dsn``), each in a fresh database of its own,
each side in a subprocess of its own (DBOS keeps global state; the memory figure is the
process's own), started by one client in that process:

* this project: ``Runtime.start`` of every run from 4 client threads (each start records the
  run and its call in one transaction), while one ``Worker`` (1 run thread; its call executor
  holds the calls on one asyncio loop) runs in the same process; then the same with every run
  started by one ``Runtime.start_many`` (500 runs per transaction);
* DBOS: ``DBOS.start_workflow_async`` of every workflow (an async workflow whose one async
  step is the call), gathered on the event loop, then every handle's result awaited.

Reported: seconds from the first start until every workflow is done, as each side is told in
its process (DBOS: its handles' results; this project: `ended_telemetry`; each output checked
after),
the part of it spent starting, memory per waiting call (the process's peak resident set
while the calls wait, less its resident set before the first start, divided by ``n``) and the
CPU each run cost over the same seconds: the side's process (all its threads) and the rest of
the machine (busy time of every core, less the process's: the PostgreSQL server, mostly, and
whatever else ran). Their sum over the machine's cores is a floor under the time to all done
that no scheduling removes.

Run: ``python -m benchmarks.waiting_calls [--n 10000] [--call-s 1.0]`` (one side alone:
``--side ours|dbos --url URL``, printing one JSON line).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from benchmarks.databases import DATABASE_PREFIX, bench_dsn, reset_database, with_database
from benchmarks.engine import ours_label

BENCHMARK = "waiting_calls"
WORKFLOW = "waiting_call"
CLIENTS = 4
DATABASES = {
    "ours": f"{DATABASE_PREFIX}_waiting",
    "ours-many": f"{DATABASE_PREFIX}_waiting_many",
    "dbos": f"{DATABASE_PREFIX}_waiting_dbos",
}
DONE_TIMEOUT_S = 600.0
"""How long this project's side waits for its runs to end before it fails."""


def rss_mb() -> float:
    """This process's resident set now, in MiB (Linux)."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * 4096 / 2**20


def cpu_seconds() -> tuple[float, float]:
    """(CPU seconds this process used, busy CPU seconds of the whole machine) so far (Linux:
    `/proc/stat`'s user, nice, system, irq and softirq time; idle, I/O wait and time stolen by
    the hypervisor are not work done here)."""
    with open("/proc/stat") as stat:
        user, nice, system, _idle, _iowait, irq, softirq = map(int, stat.readline().split()[1:8])
    return time.process_time(), (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def cpu_per_run(
    before: tuple[float, float], after: tuple[float, float], n: int
) -> dict[str, float]:
    """CPU milliseconds per run between two `cpu_seconds` readings: this process's, and the
    rest of the machine's."""
    process = after[0] - before[0]
    machine = after[1] - before[1]
    return {"cpu_ms": process / n * 1e3, "other_cpu_ms": max(0.0, machine - process) / n * 1e3}


class PeakRss:
    """Samples `rss_mb` every 20 ms in a thread of its own; `peak` is the largest seen."""

    def __init__(self) -> None:
        self.peak = rss_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss_mb())

    def stop(self) -> float:
        """Stop sampling; the peak."""
        self._stop.set()
        self._thread.join()
        return self.peak


def waiting_machine(call_s: float) -> Any:
    """One state invoking the async call; its result is the run's output."""
    from statecharts import assign, create_machine

    async def wait_one(x: int) -> int:
        await asyncio.sleep(call_s)
        return x

    return create_machine(
        {
            "id": WORKFLOW,
            "initial": "calling",
            "context": lambda input: {"x": input["x"], "result": None},
            "states": {
                "calling": {
                    "invoke": {
                        "id": "wait_one",
                        "src": "wait_one",
                        "input": lambda context, event: context["x"],
                        "onDone": {"target": "finished", "actions": "keep"},
                    }
                },
                "finished": {"type": "final"},
            },
            "output": lambda context, event: context["result"],
        },
        actors={"wait_one": wait_one},
        actions={"keep": assign({"result": lambda context, event: event["output"]})},
    )


def ended_telemetry(n: int) -> Any:
    """The default telemetry, also told in this process when `n` runs have committed the step
    that ended them: how this side sees "all done" as DBOS's sees its handles' results, in
    process, where a count of the runs by status every 50 ms cost the server ~4 ms a count at
    10,000 runs and told the time to all done to 50 ms."""
    from persistence.telemetry import Telemetry

    class Ended(Telemetry):
        def __init__(self) -> None:
            super().__init__()
            self.lock = threading.Lock()
            self.ended = 0
            self.all_ended = threading.Event()

        def end_step(self, run: Any, before: str, commit: Any, version: Any) -> None:
            super().end_step(run, before, commit, version)
            if commit is not None and version is not None and commit.status != "active":
                with self.lock:
                    self.ended += 1
                    if self.ended >= n:
                        self.all_ended.set()

    return Ended()


def ours(url: str, n: int, call_s: float, many: bool = False) -> dict[str, Any]:
    """This project's side (in this process): starts from `CLIENTS` threads (`many`: one
    `Runtime.start_many` of them all), one worker."""
    from persistence import open_store
    from persistence.runtime import Runtime
    from persistence.worker import Worker

    store = open_store(url, migrate=True)
    telemetry = ended_telemetry(n)
    runtime = Runtime(store, machines=[waiting_machine(call_s)], telemetry=telemetry)
    worker = Worker(runtime, concurrency=1, poll_ms=20)
    serving = threading.Thread(target=worker.run, daemon=True)
    serving.start()
    time.sleep(0.5)  # the worker's threads and connections up, as DBOS's after launch
    ids: list[str] = [""] * n
    base = rss_mb()
    peak = PeakRss()

    def client(c: int) -> None:
        for i in range(c, n, CLIENTS):
            ids[i] = runtime.start(WORKFLOW, input={"x": i})

    cpu_before = cpu_seconds()
    began = time.perf_counter()
    if many:
        ids = runtime.start_many(WORKFLOW, [{"x": i} for i in range(n)])
    else:
        clients = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
        for t in clients:
            t.start()
        for t in clients:
            t.join()
    started = time.perf_counter()
    assert telemetry.all_ended.wait(DONE_TIMEOUT_S), f"{telemetry.ended} of {n} runs ended"
    done = time.perf_counter()
    cpu = cpu_per_run(cpu_before, cpu_seconds(), n)
    top = peak.stop()
    worker.stop()
    serving.join()
    for i, run_id in enumerate(ids):
        record = runtime.get(run_id)
        assert record.status == "done" and record.snapshot.get("output") == i, (run_id, record)
    store.close()
    return {
        "subject": _subject("ours-many" if many else "ours"),
        "n": n,
        "starting_s": started - began,
        "done_s": done - began,
        "mb_per_call": (top - base) / n,
        **cpu,
    }


def dbos(url: str, n: int, call_s: float) -> dict[str, Any]:
    """DBOS's side (in this process): async workflows started and awaited on one loop."""

    from dbos import DBOS, DBOSConfig

    DBOS(config=DBOSConfig(name="statecharts-bench-waiting", system_database_url=url))

    @DBOS.step()
    async def wait_one(x: int) -> int:
        await asyncio.sleep(call_s)
        return x

    @DBOS.workflow()
    async def waiting_call(x: int) -> int:
        return await wait_one(x)

    DBOS.launch()

    async def everything() -> tuple[float, float, float, dict[str, float]]:
        await (await DBOS.start_workflow_async(waiting_call, -1)).get_result()  # warm-up
        base = rss_mb()
        peak = PeakRss()
        cpu_before = cpu_seconds()
        began = time.perf_counter()
        handles = await asyncio.gather(
            *(DBOS.start_workflow_async(waiting_call, i) for i in range(n))
        )
        started = time.perf_counter()
        results = await asyncio.gather(*(h.get_result() for h in handles))
        done = time.perf_counter()
        cpu = cpu_per_run(cpu_before, cpu_seconds(), n)
        top = peak.stop()
        assert list(results) == list(range(n)), "a DBOS workflow returned a wrong result"
        return started - began, done - began, (top - base) / n, cpu

    try:
        starting, took, per_call, cpu = asyncio.run(everything())
    finally:
        DBOS.destroy()
    return {
        "subject": _subject("dbos"),
        "n": n,
        "starting_s": starting,
        "done_s": took,
        "mb_per_call": per_call,
        **cpu,
    }


SIDE_TIMEOUT_S = 900
"""How long one side may take: past it, its row says it did not finish, and its time to all
done is at least this (DBOS's side took 140-420 s on one machine, over 900 s on a slower
one, where its timeout once ended the whole `make bench` and lost every section)."""


@dataclass(frozen=True)
class Row:
    """One side's figures (`finished` False: stopped at `SIDE_TIMEOUT_S`, which `done_s` then
    is, a lower bound; the other figures unknown, NaN). `cpu_ms`, `other_cpu_ms`: CPU per run
    in the side's process and in the rest of the machine (`cpu_per_run`)."""

    subject: str
    n: int
    starting_s: float
    done_s: float
    mb_per_call: float
    finished: bool = True
    cpu_ms: float = float("nan")
    other_cpu_ms: float = float("nan")

    def cpu_floor_s(self, cores: int) -> float:
        """The seconds the CPU these runs used takes at the least on `cores` cores."""
        return (self.cpu_ms + self.other_cpu_ms) * self.n / 1e3 / cores


def measure(side: str, n: int, call_s: float) -> Row:
    """One side in a subprocess of its own, against a fresh database."""
    dsn = bench_dsn()
    database = DATABASES[side]
    reset_database(dsn, database)
    import psycopg

    with psycopg.connect(with_database(dsn, "postgres"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    try:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.waiting_calls",
                "--side",
                side,
                "--url",
                with_database(dsn, database),
                "--n",
                str(n),
                "--call-s",
                str(call_s),
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=SIDE_TIMEOUT_S,
        )
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"{side} failed:\n{exc.stderr[-3000:]}") from exc
    except subprocess.TimeoutExpired:
        nan = float("nan")
        return Row(_subject(side), n, nan, SIDE_TIMEOUT_S, nan, finished=False)
    finally:
        reset_database(dsn, database)
    return Row(**json.loads(out.stdout.strip().splitlines()[-1]))


def _subject(side: str) -> str:
    """A side's subject, as its own run would have named it."""
    if side == "dbos":
        from importlib.metadata import version

        return f"DBOS Transact {version('dbos')}, async workflows"
    return f"{ours_label()}, {'start_many' if side == 'ours-many' else 'start'}, 1 worker process"


def run(n: int, call_s: float = 1.0) -> list[Row]:
    """Both sides, this project first (its runs started one by one, then all at once)."""
    return [measure(side, n, call_s) for side in ("ours", "ours-many", "dbos")]


def table(rows: list[Row], call_s: float = 1.0) -> str:
    """Markdown: both sides, the ratio of their times to all done, and the CPU per run with
    the floor it puts under the time to all done on this machine's cores."""
    peer = next((r for r in rows if r.subject.startswith("DBOS")), None)
    cores = os.cpu_count() or 1
    lines = [
        "| subject | runs | each call | started in | all done in | DBOS's time to all done "
        "over this row's | memory per waiting call | CPU per run: its process, rest of the "
        f"machine | the CPU alone on {cores} cores |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = "" if peer is None or r is peer else f"**{over(peer, r)}x**"
        if r.finished:
            figures = f"{r.starting_s:.2f} s | {r.done_s:.2f} s"
            memory = f"{r.mb_per_call * 1024:.1f} KiB"
            cpu = f"{r.cpu_ms:.2f} ms, {r.other_cpu_ms:.2f} ms | {r.cpu_floor_s(cores):.2f} s"
        else:
            figures, memory = f"— | not done after {r.done_s:.0f} s (stopped)", "—"
            cpu = "— | —"
        lines.append(
            f"| {r.subject} | {r.n:,} | {call_s:g} s async | {figures} | {ratio} | {memory} "
            f"| {cpu} |"
        )
    return "\n".join(lines)


def over(peer: Row, ours: Row) -> str:
    """The peer's time to all done over ours, formatted: a lower bound ("> ") when the peer
    was stopped unfinished, "?" when ours was."""
    if not ours.finished:
        return "?"
    ratio = f"{peer.done_s / ours.done_s:.2f}"
    return ratio if peer.finished else f"> {ratio}"


def main(argv: list[str] | None = None) -> None:
    """Command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--call-s", type=float, default=1.0)
    ap.add_argument("--side", choices=("ours", "ours-many", "dbos"))
    ap.add_argument("--url", help="with --side: the database that side uses")
    args = ap.parse_args(argv)
    if args.side and not args.url:
        ap.error("--side needs --url (a fresh PostgreSQL database for that side)")
    if args.side == "dbos":
        print(json.dumps(dbos(args.url, args.n, args.call_s)))
        return
    if args.side:
        print(json.dumps(ours(args.url, args.n, args.call_s, many=args.side == "ours-many")))
        return
    print(table(run(args.n, args.call_s), args.call_s))


if __name__ == "__main__":
    main()
