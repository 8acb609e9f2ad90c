"""Where the time goes: a deterministic profile (stdlib cProfile) of one benchmark case.

``python -m benchmarks.hotspots counter [--n 50000] [--top 15]`` prints the functions with the
most own time while this engine runs the case (``flat``, ``hier``, ``reenter``, ``counter``,
``pure flat``, ``pure hier``, ``pure counter``, ``rehydrate``). cProfile slows every Python call
alike, so read the shares, not the absolute times; for a sampling view of the same case use
``py-spy record -- python -m benchmarks.hotspots counter`` or ``pyinstrument -m
benchmarks.hotspots counter`` (both in ``benchmarks/requirements.txt``).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
from dataclasses import dataclass
from pathlib import Path

from benchmarks.engine import ALL_CASES, engine_case
from benchmarks.rehydrate import pure_rehydrate
from benchmarks.timing import Case

CASES = (*ALL_CASES, "rehydrate")


@dataclass(frozen=True)
class Hotspot:
    """One function's share of the profiled time."""

    function: str
    calls: int
    own_share: float  # of the total own time
    cumulative_share: float  # including callees


def case_by_name(name: str) -> Case:
    """This engine's benchmark case ``name`` (see ``CASES``)."""
    if name == "rehydrate":
        return pure_rehydrate()
    return engine_case(name)


def profile(name: str, n: int, top: int) -> list[Hotspot]:
    """Profile ``n`` events of case ``name``; the ``top`` functions by own time."""
    case = case_by_name(name)
    case(min(n, 2_000))  # warm caches outside the profile
    profiler = cProfile.Profile()
    profiler.runcall(case, n)
    stats = pstats.Stats(profiler)
    entries = stats.stats  # type: ignore[attr-defined]
    total = sum(own for (_, _, own, _, _) in entries.values()) or 1.0
    root = max(cum for (_, _, _, cum, _) in entries.values()) or 1.0
    spots = []
    for (filename, line, func), (_, calls, own, cum, _) in entries.items():
        where = _short(filename)
        if where.startswith("benchmarks/"):
            continue  # the benchmark's own loop and event list are not the engine's cost
        label = f"{where}:{line}({func})" if line else func
        spots.append(Hotspot(label, calls, own / total, cum / root))
    spots.sort(key=lambda s: s.own_share, reverse=True)
    return spots[:top]


def _short(filename: str) -> str:
    path = Path(filename)
    for anchor in ("statecharts", "benchmarks", "site-packages"):
        if anchor in path.parts:
            return "/".join(path.parts[path.parts.index(anchor) :])
    return path.name or filename


def markdown(name: str, spots: list[Hotspot]) -> str:
    """A table of hotspots for case ``name``."""
    lines = [
        f"**{name}** (cProfile, shares of own time)\n",
        "| function | calls | own time | incl. callees |",
        "|---|---:|---:|---:|",
    ]
    lines += [
        f"| `{s.function}` | {s.calls:,} | {s.own_share:.0%} | {s.cumulative_share:.0%} |"
        for s in spots
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Command line: profile one case and print its hotspots."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", choices=CASES)
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args(argv)
    print(markdown(args.case, profile(args.case, args.n, args.top)))


if __name__ == "__main__":
    main()
