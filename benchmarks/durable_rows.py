"""The durable benchmarks' result row (one subject on one backend, in workflows or commits per
second) and the way their clients run: ``in_threads``."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.timing import Rates

STEPS = 3
"""Steps of the durable benchmarks' workflow (three invoked steps, each result persisted)."""


@dataclass(frozen=True)
class DurableRow(Rates):
    """One subject on one backend with a number of clients or workers."""

    backend: str
    clients: int
    subject: str
    unit: str  # "commits/s" (raw) or "workflows/s"
    steps_per_unit: int  # 1 for raw commits, STEPS for workflows
    n: int
    rates: tuple[float, ...]
    note: str = ""
    transactions: tuple[float, ...] = ()  # database transactions per workflow, per run
    p99: tuple[float, ...] = ()  # latency rows: the 99th percentile per run (rates: p50)

    @property
    def steps(self) -> float:
        """Median in single-row commits (raw) or workflow steps per second."""
        return self.median * self.steps_per_unit

    @property
    def per_workflow(self) -> float | None:
        """Median database transactions per workflow, where counted."""
        return statistics.median(self.transactions) if self.transactions else None


def in_threads(clients: int, work: Callable[[int], None]) -> float:
    """Run ``work(client_index)`` on ``clients`` threads at once; return wall seconds."""
    errors: list[BaseException] = []

    def guarded(c: int) -> None:
        try:
            work(c)
        except BaseException as exc:  # re-raised in the caller's thread below
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return seconds
