"""The metric table in both sinks, and the store gauges read at a low rate."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from persistence.breakers import BreakerPolicy
from persistence.runtime import Runtime
from persistence.stores import BreakerRecord
from persistence.stores.memory import MemoryStore
from persistence.telemetry import metrics
from persistence.telemetry.metrics import OtelMetrics, PrometheusMetrics, StoreGauges
from statecharts import SimulatedClock, create_machine


class CountingStore(MemoryStore):
    """Counts the grouped reads the gauges make."""

    reads = 0

    def run_groups(self, column: str, workflow_name: str | None = None) -> Any:
        self.reads += 1
        return super().run_groups(column, workflow_name)


def _runtime() -> tuple[Runtime, CountingStore]:
    store = CountingStore()
    store.migrate()
    machine = create_machine(
        {
            "id": "pay",
            "initial": "calling",
            "states": {
                "calling": {"invoke": {"src": "bank", "breaker": "bank", "onDone": "paid"}},
                "paid": {"type": "final"},
            },
        },
        actors={"bank": lambda input: 1},
    )
    runtime = Runtime(
        store, [machine], clock=SimulatedClock(1_000_000), breakers={"mail": BreakerPolicy()}
    )
    return runtime, store


def _samples(registry: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def test_gauges_are_read_from_the_store_at_most_every_interval() -> None:
    runtime, store = _runtime()
    runtime.start("pay")
    runtime.start("pay")
    store.put_breaker(BreakerRecord("bank", "open", 5, opened_at=1), 0, 1)
    gauges = StoreGauges(runtime, every_s=3600, stuck_after_ms=1)
    prom = PrometheusMetrics(gauges=gauges)
    first = _samples(prom.registry)
    for _ in range(5):
        assert _samples(prom.registry) == first
    assert store.reads == 1  # six scrapes, one read of the store
    assert first[("statecharts_runs", (("status", "active"), ("workflow", "pay")))] == 2
    assert first[("statecharts_runs", (("status", "error"), ("workflow", "pay")))] == 0
    assert first[("statecharts_breaker_state", (("breaker", "bank"), ("state", "open")))] == 1
    assert first[("statecharts_breaker_state", (("breaker", "bank"), ("state", "closed")))] == 0
    assert first[("statecharts_breaker_state", (("breaker", "mail"), ("state", "closed")))] == 1
    runtime.clock.advance(10)  # type: ignore[attr-defined]
    gauges.every_s = 0
    assert _samples(prom.registry)[("statecharts_stuck_runs", (("workflow", "pay"),))] == 2
    assert store.reads == 2


def test_counters_and_histograms_have_the_same_names_in_both_sinks() -> None:
    reader = InMemoryMetricReader()
    otel = OtelMetrics(MeterProvider(metric_readers=[reader]))
    prom = PrometheusMetrics()
    for sink in (otel, prom):
        sink.add(metrics.RUNS_FINISHED, 1, ("pay", "done"))
        sink.record(metrics.EFFECT_DURATION, 0.2, ("pay", "start_child", "bank"))
    exported = reader.get_metrics_data()
    assert exported is not None
    names = {
        m.name: m for rm in exported.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }
    assert set(names) == {"statecharts_runs_finished", "statecharts_effect_duration_seconds"}
    point = next(iter(names["statecharts_runs_finished"].data.data_points))
    assert point.value == 1 and dict(point.attributes) == {"workflow": "pay", "outcome": "done"}
    samples = _samples(prom.registry)
    assert (
        samples[("statecharts_runs_finished_total", (("outcome", "done"), ("workflow", "pay")))]
        == 1
    )
    assert (
        samples[
            (
                "statecharts_effect_duration_seconds_count",
                (("kind", "start_child"), ("name", "bank"), ("workflow", "pay")),
            )
        ]
        == 1
    )


def test_otel_gauges_observe_the_store() -> None:
    runtime, _ = _runtime()
    runtime.start("pay")
    reader = InMemoryMetricReader()
    OtelMetrics(MeterProvider(metric_readers=[reader]), gauges=StoreGauges(runtime, every_s=0))
    data = reader.get_metrics_data()
    assert data is not None
    runs = next(
        m
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "statecharts_runs"
    )
    active = [
        p.value
        for p in runs.data.data_points
        if dict(p.attributes) == {"workflow": "pay", "status": "active"}
    ]
    assert active == [1]


@pytest.mark.parametrize("metric", metrics.INSTRUMENTS + metrics.GAUGES, ids=lambda m: m.name)
def test_names_follow_prometheus_conventions(metric: metrics.Metric) -> None:
    assert metric.name.startswith("statecharts_") and not metric.name.endswith("_total")
    assert (metric.kind == "histogram") == metric.name.endswith("_seconds")
    assert metric.labels and all(label.isidentifier() for label in metric.labels)
