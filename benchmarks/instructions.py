"""Instructions per event, counted by ``valgrind --tool=callgrind``: repeatable under load.

Wall-clock rates on a shared machine move with whatever else runs; the number of instructions
CPython executes per event does not. ``python -m benchmarks.instructions [counter shop ...]
[--n 20000]`` runs each engine case (``benchmarks.engine``: an actor's ``send``, or "pure ..."
for ``machine.transition``) twice under callgrind, sending no events and then ``n`` events
after the same warm-up, and prints the difference divided by ``n``. Needs ``valgrind``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.engine import ALL_CASES, build_machine, events_of

WARMUP = 2_000


def _inner(case: str, sent: int, n: int) -> None:
    """Build the case, warm it up, then send ``sent`` of ``n`` events built beforehand."""
    events = events_of(case.removeprefix("pure "), WARMUP + n)
    machine = build_machine(case)
    if case.startswith("pure "):
        transition = machine.transition
        snapshot, _ = machine.initial_transition()
        for event in events[:WARMUP]:
            snapshot, _ = transition(snapshot, event)
        for event in events[WARMUP : WARMUP + sent]:
            snapshot, _ = transition(snapshot, event)
        return
    from statecharts import create_actor

    actor = create_actor(machine)
    actor.start()
    send = actor.send
    for event in events[:WARMUP]:
        send(event)
    for event in events[WARMUP : WARMUP + sent]:
        send(event)


def _counts(case: str, n: int) -> tuple[int, int]:
    """Instructions of the case sending none and then ``n`` events (the two run at once)."""
    with tempfile.TemporaryDirectory() as scratch:
        outs = [Path(scratch) / f"callgrind.{sent}" for sent in (0, n)]
        runs = [
            subprocess.Popen(
                [
                    "valgrind",
                    "--tool=callgrind",
                    f"--callgrind-out-file={out}",
                    sys.executable,
                    "-m",
                    "benchmarks.instructions",
                    "--inner",
                    case,
                    str(sent),
                    str(n),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for out, sent in zip(outs, (0, n), strict=True)
        ]
        for run in runs:
            if run.wait() != 0:
                raise RuntimeError(f"callgrind run of {case!r} failed ({run.returncode})")
        totals = []
        for out in outs:
            found = re.search(r"^(?:summary|totals):\s*(\d+)", out.read_text(), re.MULTILINE)
            assert found is not None, "callgrind wrote no total"
            totals.append(int(found.group(1)))
        return totals[0], totals[1]


def per_event(case: str, n: int) -> float:
    """Instructions per event of ``case``: (count with ``n`` events - count with none) / n."""
    without, with_n = _counts(case, n)
    return (with_n - without) / n


def main(argv: list[str] | None = None) -> None:
    """Command line: print instructions per event for the cases named (default: all)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", help=f"of {', '.join(ALL_CASES)}")
    ap.add_argument("--n", type=int, default=20_000, help="events counted per case")
    ap.add_argument("--inner", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.inner:
        case, sent, n = args.inner
        _inner(case, int(sent), int(n))
        return
    if shutil.which("valgrind") is None:
        ap.error("valgrind is not on PATH")
    for case in args.cases or ALL_CASES:
        if case not in ALL_CASES:
            ap.error(f"unknown case {case!r}; choose from {list(ALL_CASES)}")
        print(f"{case:24} {per_event(case, args.n):9,.0f} instructions/event", flush=True)


if __name__ == "__main__":
    main()
