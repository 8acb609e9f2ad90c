"""Timing and result records shared by every benchmark.

One method everywhere: a *case* is a callable ``case(n) -> seconds`` that builds a fresh
instance (not timed), sends ``n`` events (timed with ``time.perf_counter`` around the event loop
only), checks the final state (so a silently ignored event fails the run) and returns the timed
seconds. Each case is warmed up once, then run ``repeat`` times and every rate is kept; where
subjects are compared, ``interleave`` alternates them run by run so that load from other
processes on a shared machine falls on all of them alike. Tables report the median and the
ratio of this project's median to each peer's.
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

#: The subject name this project's rows carry; ratios are computed against it.
OURS = "statecharts"

Case = Callable[[int], float]


class Rates:
    """What every measured row knows from its ``rates`` (empty when skipped)."""

    rates: tuple[float, ...]

    @property
    def ok(self) -> bool:
        """True when the subject was measured (not skipped)."""
        return bool(self.rates)

    @property
    def median(self) -> float:
        """Median rate over the runs (0.0 when skipped)."""
        return statistics.median(self.rates) if self.rates else 0.0


@dataclass(frozen=True)
class Result(Rates):
    """Rates of one subject on one case (empty ``rates`` means skipped, ``note`` says why)."""

    benchmark: str
    case: str
    subject: str
    n: int
    rates: tuple[float, ...]
    unit: str = "ev/s"
    note: str = ""

    @property
    def best(self) -> float:
        """Best rate over the runs (0.0 when skipped)."""
        return max(self.rates) if self.rates else 0.0

    @property
    def is_ours(self) -> bool:
        """True for this project's rows."""
        return self.subject.startswith(OURS)


def skipped(benchmark: str, case: str, subject: str, why: str, unit: str = "ev/s") -> Result:
    """A row for a subject that could not be measured, with the reason."""
    return Result(benchmark, case, subject, 0, (), unit, note=f"skipped: {why}")


#: (case, subject) -> (n, events per second) for one run.
RoundResult = dict[tuple[str, str], tuple[int, float]]
Round = Callable[[], RoundResult]


def case_round(case_name: str, subject: str, case: Case, n: int) -> Round:
    """Warm ``case`` up now; return a round that runs it once and reports its rate."""
    case(min(n, 2_000))

    def once() -> RoundResult:
        gc.collect()
        return {(case_name, subject): (n, n / case(n))}

    return once


def interleave(
    benchmark: str, rounds: Sequence[Round], repeat: int, unit: str = "ev/s"
) -> list[Result]:
    """Run every round once, ``repeat`` times over: subjects alternate, so a burst of load from
    another process hits all of them alike instead of one subject's whole series."""
    rates: dict[tuple[str, str], list[float]] = {}
    sizes: dict[tuple[str, str], int] = {}
    for _ in range(repeat):
        for one in rounds:
            for key, (n, rate) in one().items():
                rates.setdefault(key, []).append(rate)
                sizes[key] = n
    return [
        Result(benchmark, case, subject, sizes[(case, subject)], tuple(r), unit)
        for (case, subject), r in rates.items()
    ]


def ratio(ours: Result, peer: Result) -> float | None:
    """This project's median over the peer's median (``None`` when either was skipped)."""
    if not ours.ok or not peer.ok or peer.median == 0:
        return None
    return ours.median / peer.median


def fmt_rate(value: float) -> str:
    """A rate with thousands separators (three significant digits below 100)."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def fmt_ratio(value: float | None) -> str:
    """A ratio like ``3.42x`` or an em dash when not measurable."""
    return "—" if value is None else f"{value:.2f}x"


def table(results: Sequence[Result], title_cases: bool = True) -> str:
    """Markdown table per case: subject, n, median, best, ratio of ours to that row."""
    lines = []
    for case in _ordered_unique(r.case for r in results):
        rows = [r for r in results if r.case == case]
        ours = next((r for r in rows if r.is_ours and r.ok), None)
        if title_cases:
            lines.append(f"**{case}**\n")
        unit = rows[0].unit
        lines.append(f"| subject | n | median {unit} | best {unit} | {OURS} ÷ subject | note |")
        lines.append("|---|---:|---:|---:|---:|---|")
        for r in rows:
            rat = fmt_ratio(ratio(ours, r) if ours else None)
            median = fmt_rate(r.median) if r.ok else "—"
            best = fmt_rate(r.best) if r.ok else "—"
            lines.append(f"| {r.subject} | {r.n:,} | {median} | {best} | {rat} | {r.note} |")
        lines.append("")
    return "\n".join(lines)


def _ordered_unique(items: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        seen.setdefault(item, None)
    return list(seen)


def machine_info() -> dict[str, str]:
    """What the numbers were measured on (CPU, cores, Python, OS, load)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "os": platform.platform(),
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
    node = _command_version(["node", "--version"])
    if node:
        info["node"] = node
    pg = _command_version(["psql", "--version"])
    if pg:
        info["postgresql client"] = pg
    return info


def _command_version(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip()
