"""The same benchmarks on an earlier commit and on this tree, run in turn: did a change move them?

A refactoring should leave speed where it was; on a shared machine two runs minutes apart
differ by more than most changes do, so the two versions are measured alternately, round by
round (base, this tree, base, ...), and each figure is the median of its rounds. Each round
runs, in a subprocess whose working directory is that version's tree (so it imports that
version's code):

* every engine case of ``benchmarks.engine`` (an actor's ``send`` and ``machine.transition``):
  events per second over ``--events`` events;
* the durable benchmark's equal-concurrency row on PostgreSQL (``durable_runtime.
  inline_postgres``: the 3-step workflow run in its caller, one in flight): workflows per second
  over ``--workflows`` workflows.

The base is checked out into a temporary worktree (removed after). Both versions must have the
entry points named above (they exist since the durable benchmark's Inline row, December 2026).
For figures load does not move, count instructions instead (``benchmarks.instructions``,
``benchmarks.inline_profile --instructions``) in each tree.

Run: ``python -m benchmarks.before_after --base COMMIT [--rounds 5]``; prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

_MEASURE = """
import json, sys, time
from benchmarks import durable_runtime
from benchmarks.engine import ALL_CASES, engine_case
events, workflows, dsn = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rates = {}
for name in ALL_CASES:
    case = engine_case(name)
    case(events // 10)  # warm-up
    rates[name] = events / case(events)
rows = durable_runtime.inline_postgres(dsn, "postgres", 1, workflows)
rates["durable: 1 in flight (Inline, PostgreSQL)"] = rows[0].rates[0]
print(json.dumps(rates))
"""


@contextmanager
def base_tree(commit: str) -> Iterator[Path]:
    """A detached worktree of `commit` in a temporary folder, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="before-after-") as scratch:
        tree = Path(scratch) / "base"
        subprocess.run(
            ["git", "worktree", "add", "--detach", "-q", str(tree), commit],
            cwd=HERE,
            check=True,
        )
        try:
            yield tree
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(tree)], cwd=HERE, check=False
            )


def measure(tree: Path, events: int, workflows: int, dsn: str) -> dict[str, float]:
    """One round in `tree`'s code: each measure's rate."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(events), str(workflows), dsn],
        cwd=tree,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    rates: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return rates


def markdown(base: str, head: str, rounds: list[tuple[dict[str, float], dict[str, float]]]) -> str:
    """The table: each measure's median on both versions and their ratio."""
    lines = [
        f"| measure | {base} (median) | {head} (median) | {head} / {base} |",
        "|---|---|---|---|",
    ]
    for name in rounds[0][0]:
        before = statistics.median(r[0][name] for r in rounds)
        after = statistics.median(r[1][name] for r in rounds if name in r[1])
        lines.append(f"| {name} | {before:,.0f}/s | {after:,.0f}/s | {after / before:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Command line: measure `--base` and this tree alternately; print the table."""
    from benchmarks.databases import bench_dsn

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the earlier commit")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--events", type=int, default=100_000, help="events per engine case")
    ap.add_argument("--workflows", type=int, default=600, help="workflows of the durable row")
    args = ap.parse_args(argv)
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True
    ).stdout.strip()
    base = subprocess.run(
        ["git", "rev-parse", "--short", args.base], cwd=HERE, capture_output=True, text=True
    ).stdout.strip()
    print(f"load average {os.getloadavg()[0]:.2f} at the start", file=sys.stderr)
    rounds: list[tuple[dict[str, float], dict[str, float]]] = []
    with base_tree(args.base) as tree:
        for i in range(args.rounds):
            before = measure(tree, args.events, args.workflows, bench_dsn())
            after = measure(HERE, args.events, args.workflows, bench_dsn())
            rounds.append((before, after))
            print(f"round {i + 1} of {args.rounds} done", file=sys.stderr, flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end", file=sys.stderr)
    print(markdown(base, f"{head} (this tree)", rounds))


if __name__ == "__main__":
    main()
