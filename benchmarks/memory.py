"""Memory benchmark: bytes per in-memory actor and per persisted snapshot (tracemalloc).

For each machine: bytes one started actor holds (``k`` actors kept alive, traced allocations
divided by ``k``, after one warm-up instance so machine-level caches are not counted), the size
of its persisted snapshot as JSON bytes, and the bytes one restored ``Snapshot`` holds in
memory. The Python peers' started machines are measured the same way on the charts they share.
Machines: the benchmark charts plus the project's example workflows (each ``machines.<pkg>``
package's ``MACHINES``). Run: ``python -m benchmarks.memory [--k 1000]``.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import pkgutil
import sys
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from benchmarks.engine import build_machine, ours_label
from benchmarks.peers import load_peers

BENCHMARK = "memory"
CHARTS = ("flat", "hier", "counter")


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


#: Effects whose execution reaches outside the actor (user code, services, other actors).
OUTSIDE = frozenset({"action", "start_child", "emit", "send_to", "send_parent"})


def ours_rows(machines: dict[str, Any], k: int) -> list[MemoryRow]:
    """This engine: per started actor, per persisted snapshot, per restored snapshot.

    An actor is started only when its machine's initial transition reaches nothing outside
    (starting an example workflow would call its services); otherwise that column is empty.
    """
    from statecharts import create_actor, snapshot_to_json

    label = ours_label()
    rows = []
    for name, machine in machines.items():

        def started(machine: Any = machine) -> object:
            actor = create_actor(machine)
            actor.start()
            return actor

        initial, effects = machine.initial_transition()
        stored = snapshot_to_json(initial)
        outside = sorted({e.kind for e in effects} & OUTSIDE)
        per_actor = None if outside else bytes_per(started, k)
        note = f"actor not started: its start runs {', '.join(outside)}" if outside else ""
        rows.append(
            MemoryRow(
                label,
                name,
                per_actor,
                len(stored),
                bytes_per(partial(machine.restore, stored), k),
                note,
            )
        )
    return rows


def example_machines() -> tuple[dict[str, Any], dict[str, str]]:
    """Every ``MACHINES`` mapping of the packages under ``machines/`` (the project's examples);
    reasons for packages that do not import."""
    loaded: dict[str, Any] = {}
    failed: dict[str, str] = {}
    try:
        import machines  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return loaded, failed
    for info in pkgutil.iter_modules(machines.__path__, "machines."):
        if not info.ispkg:
            continue
        try:
            module = importlib.import_module(info.name)
        except Exception as exc:  # an example that cannot load here is reported, not fatal
            failed[info.name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
            continue
        for machine_id, machine in getattr(module, "MACHINES", {}).items():
            loaded[f"{info.name}: {machine_id}"] = machine
    return loaded, failed


def peer_rows(k: int) -> list[MemoryRow]:
    """Each Python peer: bytes per started machine on the shared charts."""
    peers, missing = load_peers()
    rows = [
        MemoryRow(p.name, f"bench {case}", bytes_per(partial(p.instance, case), k))
        for p in peers
        for case in CHARTS
    ]
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
        rows += [
            MemoryRow(ours_label(), name, None, note=f"did not import: {why}")
            for name, why in failed.items()
        ]
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
    lines += [
        f"| {r.subject} | {r.machine} | {num(r.per_actor)} | {num(r.snapshot_json)} | "
        f"{num(r.per_restored)} | {r.note} |"
        for r in rows
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Command line: run the memory benchmark and print its table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=1_000, help="objects alive at once per measurement")
    args = ap.parse_args(argv)
    print(markdown(run(args.k)))


if __name__ == "__main__":
    main()
