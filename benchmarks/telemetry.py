"""What tracing and metrics cost a durable worker (``python -m benchmarks.telemetry``).

The same work in every row: ``n`` runs of the 3-step workflow (``benchmarks.durable_runtime``:
three invoked calls, each result assigned into the context) started with ``Runtime.start`` and
driven to the end by one ``Worker.run_until_idle`` thread, on the same kind of store (a fresh
SQLite file per run, and the in-memory store, where the store costs least and so the hooks show
most). Only the runtime's ``Telemetry`` differs:

- **off**: ``Telemetry.off()``: no spans, no metrics (the hooks are called and return at once);
  the baseline every ratio is against.
- **API, no SDK**: the default; OpenTelemetry's API is installed but no SDK is configured, so
  no span is built (each would be the API's no-op span) and nothing is exported.
- **SDK, exported**: an SDK ``TracerProvider`` with the batch span processor and an exporter
  that drops what it receives (the cost of recording and handing spans over, not of a network).
- **SDK + Prometheus**: the same plus ``PrometheusMetrics`` counters and histograms.

Subjects alternate run by run (``timing.interleave``-style) so a loaded machine slows them
alike; the table gives each subject's median workflows/s and its ratio to **off**.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.durable_runtime import WORKFLOW, three_steps_machine

SUBJECTS = ("off", "API, no SDK", "SDK, exported", "SDK + Prometheus")


@dataclass(frozen=True)
class Row:
    """One subject on one store: workflows/s of each measured run."""

    store: str
    subject: str
    n: int
    rates: tuple[float, ...]

    @property
    def median(self) -> float:
        """Median workflows/s."""
        return statistics.median(self.rates)


def _telemetry(subject: str) -> tuple[Any, Callable[[], None]]:
    """The runtime's Telemetry for `subject`, and what to call when the run is over."""
    from persistence.telemetry import Telemetry

    if subject == "off":
        return Telemetry.off(), lambda: None
    if subject == "API, no SDK":
        return Telemetry(), lambda: None
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Discard(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard()))
    sinks: list[Any] = []
    if subject == "SDK + Prometheus":
        from persistence.telemetry.metrics import PrometheusMetrics

        sinks.append(PrometheusMetrics())
    return Telemetry(tracer_provider=provider, metrics=sinks), provider.shutdown


def measure_once(store_kind: str, subject: str, n: int, directory: Path) -> float:
    """Workflows/s of one run: start `n` runs, drive them to the end, check every one."""
    from persistence import open_store
    from persistence.runtime import Runtime
    from persistence.worker import Worker

    url = (
        "memory://"
        if store_kind == "memory"
        else f"sqlite:///{directory / f'{time.monotonic_ns()}.db'}"
    )
    store = open_store(url, migrate=True)
    telemetry, finish = _telemetry(subject)
    try:
        runtime = Runtime(store, [three_steps_machine()], telemetry=telemetry)
        started = time.perf_counter()
        ids = [runtime.start(WORKFLOW, {"x": i}) for i in range(n)]
        Worker(runtime).run_until_idle()
        took = time.perf_counter() - started
        bad = [i for i in ids if runtime.get(i).status != "done"]
        if bad:
            raise RuntimeError(f"{len(bad)} runs did not finish under {subject!r}")
    finally:
        finish()
        store.close()
    return n / took


def run(n: int = 300, repeat: int = 5, stores: Sequence[str] = ("sqlite", "memory")) -> list[Row]:
    """Every subject on every store, `repeat` interleaved runs each (one warm-up run first)."""
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="statecharts-bench-telemetry-") as tmp:
        for store_kind in stores:
            rates: dict[str, list[float]] = {s: [] for s in SUBJECTS}
            measure_once(store_kind, "off", max(n // 10, 10), Path(tmp))  # warm-up
            for _ in range(repeat):
                for subject in SUBJECTS:
                    rates[subject].append(measure_once(store_kind, subject, n, Path(tmp)))
            rows += [Row(store_kind, s, n, tuple(rates[s])) for s in SUBJECTS]
    return rows


def markdown(rows: Sequence[Row]) -> str:
    """The table: median workflows/s per subject and store, and the ratio to **off**."""
    lines = [
        "| store | telemetry | workflows/s (median) | ÷ off | runs |",
        "|---|---|---:|---:|---:|",
    ]
    for row in rows:
        base = next(r for r in rows if r.store == row.store and r.subject == "off")
        lines.append(
            f"| {row.store} | {row.subject} | {row.median:,.0f} | "
            f"{row.median / base.median:.2f} | {len(row.rates)} x {row.n} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--store", action="append", choices=("sqlite", "memory"))
    args = parser.parse_args(argv)
    print(markdown(run(args.n, args.repeat, tuple(args.store or ("sqlite", "memory")))))


if __name__ == "__main__":
    main()
