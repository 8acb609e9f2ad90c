"""Memory benchmark: bytes per in-memory actor and per persisted snapshot (tracemalloc).

For each machine: bytes one started actor holds (``k`` actors kept alive, traced allocations
divided by ``k``, after one warm-up instance so machine-level caches are not counted), the size
of its persisted snapshot as JSON bytes, and the bytes one restored ``Snapshot`` holds in
memory. The Python peers' started machines are measured the same way on the charts they share.
Machines: the benchmark charts plus every example machine under ``machines/`` that loads
without implementations. Run: ``python -m benchmarks.memory [--k 1000]``.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.engine import build_machine, ours_label
from benchmarks.peers import load_peers

BENCHMARK = "memory"
CHARTS = ("flat", "hier", "counter")
MACHINES_DIR = Path(__file__).resolve().parent.parent / "machines"


@dataclass(frozen=True)
class MemoryRow:
    """Bytes measured for one subject on one machine (``None``: not applicable)."""

    subject: str
    machine: str
    per_actor: float | None
    snapshot_json: int | None = None
    per_restored: float | None = None
    note: str = ""


def bytes_per(make: Callable[[], object], k: int) -> float:
    """Traced bytes per object when ``k`` objects made by ``make`` are alive at once."""
    make()  # warm-up: lazy, shared caches are not per-object cost
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        keep = [make() for _ in range(k)]
        used = tracemalloc.get_traced_memory()[0] - start - sys.getsizeof(keep)
    finally:
        tracemalloc.stop()
    del keep
    return used / k


def ours_rows(machines: dict[str, Any], k: int) -> list[MemoryRow]:
    """This engine: per started actor, per persisted snapshot, per restored snapshot."""
    from statecharts import create_actor, snapshot_to_json

    label = ours_label()
    rows = []
    for name, machine in machines.items():

        def started(machine: Any = machine) -> object:
            actor = create_actor(machine)
            actor.start()
            return actor

        stored = snapshot_to_json(machine.initial_transition()[0])
        rows.append(MemoryRow(label, name, bytes_per(started, k), len(stored),
                              bytes_per(partial(machine.restore, stored), k)))
    return rows


def example_machines() -> tuple[dict[str, Any], dict[str, str]]:
    """Machines from ``machines/**/*.json|yaml`` that load as they are; reasons for the rest."""
    from statecharts import load_machine

    loaded: dict[str, Any] = {}
    failed: dict[str, str] = {}
    if not MACHINES_DIR.is_dir():
        return loaded, failed
    for path in sorted(MACHINES_DIR.rglob("*")):
        if path.suffix not in {".json", ".yaml", ".yml"}:
            continue
        name = str(path.relative_to(MACHINES_DIR.parent))
        try:
            loaded[name] = load_machine(path)
        except Exception as exc:  # a definition needing implementations is reported, not fatal
            failed[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    return loaded, failed


def peer_rows(k: int) -> list[MemoryRow]:
    """Each Python peer: bytes per started machine on the shared charts."""
    peers, missing = load_peers()
    rows = [MemoryRow(p.name, f"bench {case}", bytes_per(partial(p.instance, case), k))
            for p in peers for case in CHARTS]
    rows += [MemoryRow(name, "-", None, note=f"skipped: {why}") for name, why in missing.items()]
    return rows


def run(k: int = 1_000) -> list[MemoryRow]:
    """This engine on the benchmark charts and example machines, then the peers."""
    rows: list[MemoryRow] = []
    try:
        machines = {f"bench {case}": build_machine(case) for case in CHARTS}
        examples, failed = example_machines()
    except ImportError as exc:
        rows.append(MemoryRow(ours_label(), "-", None, note=f"skipped: engine ({exc})"))
    else:
        machines.update(examples)
        rows += ours_rows(machines, k)
        rows += [MemoryRow(ours_label(), name, None, note=f"not loadable alone: {why}")
                 for name, why in failed.items()]
    return rows + peer_rows(k)


def markdown(rows: list[MemoryRow]) -> str:
    """The memory table."""
    def num(x: float | None) -> str:
        return "—" if x is None else f"{x:,.0f}"

    lines = [
        "| subject | machine | bytes per started actor | persisted snapshot (JSON bytes) | "
        "bytes per restored snapshot | note |",
        "|---|---|---:|---:|---:|---|",
    ]
    lines += [f"| {r.subject} | {r.machine} | {num(r.per_actor)} | {num(r.snapshot_json)} | "
              f"{num(r.per_restored)} | {r.note} |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Command line: run the memory benchmark and print its table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=1_000, help="objects alive at once per measurement")
    args = ap.parse_args(argv)
    print(markdown(run(args.k)))


if __name__ == "__main__":
    main()
