"""Where one durable step's latency goes: `send` to the committed new state, idle worker.

The step latency benchmark (`durable_runtime.step_latency`) as a profile: each phase's start
and end are taken inside the process (the store's calls and the step planner wrapped with
timers), and the gaps between consecutive marks are reported as percentiles per transition,
e.g. for a run at rest, whose event the send applies itself from the row this runtime wrote
(issue 20f): `send -> stage` (no database call), `stage -> staged` (restore, transition,
persist), `staged -> sent` (the row lock, the step's conditional statement and the commit: one
round trip on PostgreSQL; on SQLite `send -> stage` locks the row, queues the event and reads
the pending work first, as PostgreSQL does after a row that moved on); with ``--queue``
(`Runtime(step_in_send=False)`, every event queued as before): `send -> sent` (the `send`'s
statement and commit), `sent -> woken` (the wake-up reaching the worker thread), `read -> read
done` (the claim-free read of the run by id) or `claim -> claimed` (a claim, when the run did
not qualify), `stage -> staged`, `commit -> committed` (the step's statement and commit).
Counts of each phase say which path the steps took.

Run: ``python -m benchmarks.step_profile [URL] [--events 300] [--queue]`` (default: the bench
DSN in a schema of its own, dropped afterwards; or ``sqlite:///path``).
"""

from __future__ import annotations

import argparse
import collections
import functools
import itertools
import time
from typing import Any

from benchmarks.databases import store_url_or_scratch
from benchmarks.durable_runtime import idle_worker_steps


def profile(
    url: str,
    events: int = 300,
    step_in_send: bool = True,
) -> tuple[dict[tuple[str, str], list[float]], list[float]]:
    """Per consecutive pair of marks, the gaps in ms; and the total latencies in ms."""
    from persistence import open_store, planning
    from persistence.wakeup import Wakeup

    marks: dict[str, float] = {}

    def timed(f: Any, before: str, after: str) -> Any:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            marks.setdefault(before, time.perf_counter())
            try:
                return f(*args, **kwargs)
            finally:
                marks.setdefault(after, time.perf_counter())

        return wrapper

    store = open_store(url, migrate=True)
    store_methods = {
        "send_event": ("send", "sent"),
        "send_and_step": ("send", "sent"),
        "read_work": ("read", "read done"),
        "claim_work": ("claim", "claimed"),
        "commit_steps": ("commit", "committed"),
    }
    for name, (before, after) in store_methods.items():
        if hasattr(store, name):
            setattr(store, name, timed(getattr(store, name), before, after))
    wait, plan = Wakeup.wait, planning.Planner.plan

    def woken(self: Wakeup, seen: int, timeout: float) -> bool:
        got = wait(self, seen, timeout)
        marks.setdefault("woken", time.perf_counter())
        return got

    Wakeup.wait = woken  # type: ignore[method-assign]
    planning.Planner.plan = timed(plan, "stage", "staged")  # type: ignore[method-assign]
    gaps: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    totals: list[float] = []
    try:
        for t0, done in idle_worker_steps(store, events, marks.clear, step_in_send=step_in_send):
            seen = {"t0": t0, **marks, "done": done}
            names = sorted(seen, key=seen.__getitem__)
            for a, b in itertools.pairwise(names):
                gaps[(a, b)].append((seen[b] - seen[a]) * 1000)
            totals.append((done - t0) * 1000)
    finally:
        Wakeup.wait = wait  # type: ignore[method-assign]
        planning.Planner.plan = plan  # type: ignore[method-assign]
        store.close()
    return gaps, totals


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def markdown(gaps: dict[tuple[str, str], list[float]], totals: list[float]) -> str:
    """The phases (most frequent first), then the whole step."""
    lines = ["| from | to | steps | p50 ms | p90 ms | p99 ms |", "|---|---|---:|---:|---:|---:|"]
    shown = [(pair, v) for pair, v in gaps.items() if len(v) >= len(totals) // 10]
    for (a, b), values in sorted(shown, key=lambda kv: (-len(kv[1]), _pct(kv[1], 0.5))):
        lines.append(
            f"| {a} | {b} | {len(values)} | {_pct(values, 0.5):.3f} | "
            f"{_pct(values, 0.9):.3f} | {_pct(values, 0.99):.3f} |"
        )
    lines.append(
        f"| send | committed (whole step) | {len(totals)} | {_pct(totals, 0.5):.3f} | "
        f"{_pct(totals, 0.9):.3f} | {_pct(totals, 0.99):.3f} |"
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Command line: profile the step latency and print the table with the load average."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("url", nargs="?", help="store URL (default: the bench DSN, own schema)")
    ap.add_argument("--events", type=int, default=300)
    ap.add_argument(
        "--queue",
        action="store_true",
        help="queue every event for the worker (Runtime(step_in_send=False))",
    )
    args = ap.parse_args(argv)
    with store_url_or_scratch(args.url, "step_profile") as url:
        print(markdown(*profile(url, args.events, not args.queue)))


if __name__ == "__main__":
    main()
