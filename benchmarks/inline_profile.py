"""Where a workflow run in its caller (`Inline.run`) spends its time, phase by phase.

The equal-concurrency row of the durable benchmark (`durable_runtime.INLINE`: the 3-step
workflow, one in flight) as a profile. Wall time on a shared machine mostly measures the other
processes' fsyncs, so each phase is reported as **CPU time of the calling thread**
(`time.thread_time`, user and system: what this process spends, however long it waits), and
the database side as the **CPU time of the PostgreSQL backend** serving the store's connection
(read from `/proc/<pid>/stat`, so only for a server on this machine). The phases are the
methods on the path, each timed without the phases it calls:

* `start: initial transition` (`Runtime.prepare_run`'s work), `start: insert` (`create_run` around
  its statement), `step: execute effects` (the round's effect calls and their spans),
  `step: apply and stage` (results applied, the commit built), `step: commit` (`commit_steps`
  around its statement), `psycopg execute` (adapting the parameters, sending, waiting,
  parsing the reply), and `rest` (the driver's loop, telemetry of steps, `begin_run` itself);
* statements and round trips per workflow (`psycopg.Cursor.execute` calls, which
  `Connection.execute` makes too: the store runs its hot statements on a cursor it keeps; each
  is one round trip and, in autocommit, one transaction, except those sent in pipeline mode
  (a burst of call ends' steps from rest: one round trip, one transaction); a single call's
  end with its step, from rest, is one statement).

Run: ``python -m benchmarks.inline_profile [URL] [--n 1000]`` (default: the bench DSN in a
schema of its own, dropped afterwards). Compare two versions by running each in turn.

``--instructions`` counts instead the **instructions the calling process executes per
workflow** (``valgrind --tool=callgrind``: repeatable on a loaded machine, where CPU time is
not; the server is another process and not counted): each telemetry setting (the default
`Telemetry`, then `Telemetry.off()`) is run twice under callgrind after the same warm-up, with
no workflows and then with ``--n`` (default 200), and the difference divided by ``n``. Needs
``valgrind``.
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.databases import store_url_or_scratch
from benchmarks.durable_runtime import WORKFLOW, expected, three_steps_machine

WARMUP = 20
REST = "rest (driver loop, step telemetry, begin_run)"
CALL_END = "call end: with its result's step (around its statement)"
"""A call's end and the step that applies its result, one transaction (calls run beside
their runs, `persistence.calls`)."""
PSYCOPG = "psycopg execute (adapt, send, wait, parse)"


class _Phases:
    """Exclusive CPU time per phase: a wrapped method's time minus its wrapped callees'."""

    def __init__(self) -> None:
        self.cpu: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        self._inner: list[int] = []

    def wrap(self, owner: Any, name: str, label: str) -> Callable[[], None]:
        """Time `owner.name` as `label`; returns the undo."""
        original = getattr(owner, name)

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.thread_time_ns()
            self._inner.append(0)
            try:
                return original(*args, **kwargs)
            finally:
                spent = time.thread_time_ns() - began
                self.cpu[label] += spent - self._inner.pop()
                self.calls[label] += 1
                if self._inner:
                    self._inner[-1] += spent

        setattr(owner, name, timed)
        return lambda: setattr(owner, name, original)

    def clear(self) -> None:
        """Forget the warm-up."""
        self.cpu.clear()
        self.calls.clear()


@contextmanager
def _instrumented(phases: _Phases, store: Any) -> Iterator[None]:
    from persistence import calls, driver, effect_rounds, inline, planning, runtime

    undo = [
        phases.wrap(inline.Inline, "run", REST),
        phases.wrap(runtime.Runtime, "_initial_run", "start: initial transition"),
        phases.wrap(store, "create_run", "start: insert (around its statement)"),
        phases.wrap(effect_rounds.EffectRounds, "execute_round", "step: execute effects (+ spans)"),
        phases.wrap(driver.RunDriver, "_stage_safely", "step: apply and stage the commit"),
        phases.wrap(planning.Planner, "plan", "step: apply and stage the commit"),
        phases.wrap(store, "commit_steps", "step: commit (around its statement)"),
        phases.wrap(calls.CallExecutor, "_run_here", "call: run it and record its end"),
        phases.wrap(store, "send_and_step", CALL_END),
    ]
    if store.dialect == "postgres":
        import psycopg

        undo.append(phases.wrap(psycopg.Cursor, "execute", PSYCOPG))
    try:
        yield
    finally:
        for step in reversed(undo):
            step()


def _backend_cpu(pids: list[int]) -> float | None:
    """CPU seconds the backends `pids` have used (None where /proc cannot tell)."""
    total = 0
    try:
        for pid in pids:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
    except (OSError, IndexError, ValueError):
        return None
    return total / os.sysconf("SC_CLK_TCK")


def _backend_pids(pool: Any) -> list[int]:
    """The backends of every connection of `pool` (None: no backends), all idle after the
    warm-up, all read: the store's own pool hands out the connection given back last, a pool
    given by the caller may hand them out in turn, spreading the workflows' statements over
    all of them (reading one backend counted half of them where the pool had grown to two)."""
    if pool is None:
        return []
    conns = [pool.getconn() for _ in range(pool.get_stats()["pool_size"])]
    try:
        return [conn.execute("SELECT pg_backend_pid()").fetchone()[0] for conn in conns]
    finally:
        for conn in conns:
            pool.putconn(conn)


def profile(url: str, n: int = 1000) -> dict[str, Any]:
    """Run `n` workflows through `Inline.run` on `url` and return the per-workflow figures
    (on SQLite: the phases only, no statement count or backend)."""
    from persistence import open_store
    from persistence.inline import Inline
    from persistence.runtime import Runtime

    store = open_store(url, migrate=True)
    phases = _Phases()
    try:
        inline = Inline(Runtime(store, machines=[three_steps_machine()]))
        with _instrumented(phases, store):
            for x in range(WARMUP):
                inline.run(WORKFLOW, {"x": x})
            pids = _backend_pids(getattr(store, "_pool", None))
            phases.clear()
            server0, cpu0, wall0 = _backend_cpu(pids), time.thread_time(), time.perf_counter()
            for x in range(n):
                got = inline.run(WORKFLOW, {"x": x})
                assert got.status == "done" and got.output == expected(x), (got, expected(x))
            wall, cpu = time.perf_counter() - wall0, time.thread_time() - cpu0
            server1 = _backend_cpu(pids)
    finally:
        store.close()
    statements = phases.calls[PSYCOPG] if getattr(store, "dialect", "") == "postgres" else None
    return {
        "n": n,
        "wall_ms": wall / n * 1e3,
        "cpu_ms": cpu / n * 1e3,
        "backend_ms": None
        if server0 is None or server1 is None or not pids
        else (server1 - server0) / n * 1e3,
        "statements": None if statements is None else statements / n,
        "phases": {label: ns / n / 1e6 for label, ns in phases.cpu.most_common()},
    }


TELEMETRY = {"default Telemetry": "default", "Telemetry.off()": "off"}


def _inner(url: str, telemetry: str, n: int) -> None:
    """Under callgrind: the warm-up, then `n` workflows (`telemetry`: "default" or "off")."""
    from persistence import open_store
    from persistence.inline import Inline
    from persistence.runtime import Runtime
    from persistence.telemetry import Telemetry

    store = open_store(url, migrate=True)
    try:
        chosen = Telemetry.off() if telemetry == "off" else Telemetry()
        inline = Inline(Runtime(store, machines=[three_steps_machine()], telemetry=chosen))
        for x in range(WARMUP + n):
            inline.run(WORKFLOW, {"x": x})
    finally:
        store.close()


def _callgrind_total(url: str, telemetry: str, n: int, out: Path) -> int:
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-m",
            "benchmarks.inline_profile",
            url,
            "--inner",
            telemetry,
            str(n),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    found = re.search(r"^(?:summary|totals):\s*(\d+)", out.read_text(), re.MULTILINE)
    assert found is not None, "callgrind wrote no total"
    return int(found.group(1))


def instructions(url: str, n: int = 200) -> dict[str, float]:
    """Instructions per workflow of the calling process, per telemetry setting."""
    counts = {}
    with tempfile.TemporaryDirectory() as scratch:
        for label, telemetry in TELEMETRY.items():
            base, full = (
                _callgrind_total(url, telemetry, sent, Path(scratch) / f"{telemetry}.{sent}")
                for sent in (0, n)
            )
            counts[label] = (full - base) / n
    return counts


def markdown(result: dict[str, Any]) -> str:
    """The per-workflow figures as a table."""
    backend, statements = result["backend_ms"], result["statements"]
    counted = "" if statements is None else f"; {statements:.2f} statements (round trips) each"
    lines = [
        f"{result['n']:,} workflows, one in flight: wall {result['wall_ms']:.2f} ms per "
        f"workflow{counted}",
        "",
        "| phase | CPU ms per workflow |",
        "|---|---:|",
        *(f"| {label} | {ms:.3f} |" for label, ms in result["phases"].items()),
        f"| **the calling thread, in all** | **{result['cpu_ms']:.3f}** |",
        f"| PostgreSQL backend (statements and commits) | "
        f"{'—' if backend is None else f'{backend:.3f}'} |",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Command line: profile `Inline.run` and print the table with the load average."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("url", nargs="?", help="store URL (default: the bench DSN, own schema)")
    ap.add_argument("--n", type=int, help="workflows (default 1000; 200 with --instructions)")
    ap.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per workflow under callgrind instead",
    )
    ap.add_argument("--inner", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.inner:
        _inner(args.url, args.inner[0], int(args.inner[1]))
        return
    if args.instructions and shutil.which("valgrind") is None:
        ap.error("valgrind is not on PATH")
    with store_url_or_scratch(args.url, "inline_profile") as url:
        if args.instructions:
            for label, count in instructions(url, args.n or 200).items():
                print(f"{label:20} {count / 1e6:6.3f}M instructions per workflow", flush=True)
        else:
            print(markdown(profile(url, args.n or 1000)))


if __name__ == "__main__":
    main()
