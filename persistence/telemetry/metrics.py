"""Metrics of durable runs: one table of instruments, written to Prometheus or OpenTelemetry.

Counters and histograms are updated by the process that does the work (a worker counts the steps
it commits, the effects it executes, the takeovers it makes). Gauges describe the whole store
(runs by status, stuck runs, breaker states, named limits in use) and are read from it at a low
rate by `StoreGauges`, whatever the scrape rate, so any one worker (or all of them) can expose
them.

`PrometheusMetrics` needs `prometheus-client` (the `metrics` extra); `OtelMetrics` needs
OpenTelemetry's API (the `otel` extra) and a configured `MeterProvider` to export anything.
Names follow Prometheus' conventions (`_total` is added to counters by the exposition, units
are suffixes); OpenTelemetry instruments carry the same names.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from persistence.stores import LimitUsage, RunQuery, Store, StoreError
from persistence.stores.records import CLOSED, HALF_OPEN, OPEN, RUN_STATUSES
from statecharts import Machine

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider, Observation
    from prometheus_client import CollectorRegistry

log = logging.getLogger("statecharts.metrics")


@dataclass(frozen=True, slots=True)
class Metric:
    """One instrument: its name, kind ("counter", "histogram", "gauge"), help and labels."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...]
    unit: str = ""


DURATION_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)
LAG_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)

RUNS_STARTED = Metric("statecharts_runs_started", "counter", "Runs started", ("workflow",))
RUNS_FINISHED = Metric(
    "statecharts_runs_finished",
    "counter",
    "Runs ended, by outcome (done, done_partial, error, cancelled)",
    ("workflow", "outcome"),
)
STEPS = Metric("statecharts_steps", "counter", "Steps committed", ("workflow",))
STEP_DURATION = Metric(
    "statecharts_step_duration_seconds",
    "histogram",
    "Time of one step: its effects executed, results applied, committed",
    ("workflow",),
    "s",
)
EFFECT_DURATION = Metric(
    "statecharts_effect_duration_seconds",
    "histogram",
    "Time to execute one effect (an action, invoked call or emit)",
    ("workflow", "kind", "name"),
    "s",
)
EFFECT_FAILURES = Metric(
    "statecharts_effect_failures",
    "counter",
    "Effects that failed (raised, or a call that returned an error)",
    ("workflow", "kind", "name"),
)
RETRIES_SCHEDULED = Metric(
    "statecharts_retries_scheduled",
    "counter",
    "Retries scheduled: a retried call's attempt failed, or a transient failure rolled a step back",
    ("workflow", "state"),
)
LEASE_TAKEOVERS = Metric(
    "statecharts_lease_takeovers",
    "counter",
    "Runs claimed after another worker's lease expired",
    ("workflow",),
)
LEASES_LOST = Metric(
    "statecharts_leases_lost",
    "counter",
    "Steps not committed because another worker had taken the run",
    ("workflow",),
)
CLAIM_LAG = Metric(
    "statecharts_claim_lag_seconds",
    "histogram",
    "How late runs were claimed: claim time minus the time they were due",
    ("workflow",),
    "s",
)
DEAD_LETTERS = Metric(
    "statecharts_dead_letters",
    "counter",
    "Events dead-lettered because their run had ended",
    ("workflow",),
)
POISONED_VALUES = Metric(
    "statecharts_poisoned_values",
    "counter",
    "Values refused because no store can hold them exactly (the run fails)",
    ("workflow",),
)
RUNS = Metric(
    "statecharts_runs", "gauge", "Runs in the store, by workflow and status", ("workflow", "status")
)
STUCK_RUNS = Metric(
    "statecharts_stuck_runs",
    "gauge",
    "Active runs nobody touched for the stuck threshold and not waiting for a later timer",
    ("workflow",),
)
BREAKER_STATE = Metric(
    "statecharts_breaker_state",
    "gauge",
    "1 for the circuit breaker's current state, 0 for the others",
    ("breaker", "state"),
)

CAPACITY_WAITS = Metric(
    "statecharts_capacity_waits",
    "counter",
    "Times a run or a call was released to wait for a named limit (capacity, rate, "
    "Retry-After pause)",
    ("workflow", "limit", "reason"),
)
LIMIT_IN_FLIGHT = Metric(
    "statecharts_limit_in_flight",
    "gauge",
    "Calls (or runs) holding a slot of a named concurrency limit",
    ("limit",),
)
RUNS_WAITING = Metric(
    "statecharts_runs_waiting",
    "gauge",
    "Active runs, and calls beside their runs, waiting for a named limit, by reason",
    ("limit", "reason"),
)
LIMIT_PAUSED = Metric(
    "statecharts_limit_pause_left",
    "gauge",
    "Seconds left of a Retry-After pause of a named limit (0: not paused)",
    ("limit",),
)

INSTRUMENTS = (
    RUNS_STARTED,
    RUNS_FINISHED,
    STEPS,
    STEP_DURATION,
    EFFECT_DURATION,
    EFFECT_FAILURES,
    RETRIES_SCHEDULED,
    LEASE_TAKEOVERS,
    LEASES_LOST,
    CLAIM_LAG,
    DEAD_LETTERS,
    POISONED_VALUES,
    CAPACITY_WAITS,
)
"""Updated by the process doing the work."""

GAUGES = (RUNS, STUCK_RUNS, BREAKER_STATE, LIMIT_IN_FLIGHT, RUNS_WAITING, LIMIT_PAUSED)
"""Read from the store by `StoreGauges`."""

_BUCKETS = {CLAIM_LAG.name: LAG_BUCKETS}


class MetricsSink(Protocol):
    """Where counter increments and histogram observations go."""

    def add(self, metric: Metric, amount: float, labels: tuple[str, ...]) -> None:
        """Add `amount` to counter `metric` with label values `labels` (in its label order)."""
        ...

    def record(self, metric: Metric, value: float, labels: tuple[str, ...]) -> None:
        """Record one observation of histogram `metric`."""
        ...


Reading = tuple[Metric, tuple[str, ...], float]


class _Clock(Protocol):
    def now(self) -> int: ...


class _Limits(Protocol):
    @property
    def limits(self) -> Mapping[str, Any]: ...


class GaugedRuntime(Protocol):
    """What `StoreGauges` reads of a runtime (`persistence.Runtime` is one): its store, its
    clock, its definitions, its named limits and breaker policies."""

    @property
    def store(self) -> Store: ...

    @property
    def clock(self) -> _Clock: ...

    @property
    def machines(self) -> Mapping[str, Machine]: ...

    @property
    def load(self) -> _Limits: ...

    @property
    def breaker_policies(self) -> Mapping[str, Any]: ...


class StoreGauges:
    """Runs by status, stuck runs and breaker states, read from the runtime's store at most every
    `every_s` seconds (a scrape in between gets the last reading). Every status of every known
    workflow is reported, zero included, so an alert on a missing series is never needed."""

    def __init__(
        self, runtime: GaugedRuntime, *, every_s: float = 15.0, stuck_after_ms: int = 3_600_000
    ) -> None:
        self.runtime = runtime
        self.every_s = every_s
        self.stuck_after_ms = stuck_after_ms
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._readings: list[Reading] = []

    def readings(self) -> list[Reading]:
        """The gauges' values, refreshed from the store when the last reading is too old."""
        with self._lock:
            if self._read_at is None or time.monotonic() - self._read_at >= self.every_s:
                try:
                    self._readings = self._read()
                except StoreError as exc:  # keep the last values; the next scrape tries again
                    log.warning("metrics: reading the store failed: %s", exc)
                self._read_at = time.monotonic()
            return list(self._readings)

    def _read(self) -> list[Reading]:
        store = self.runtime.store
        workflows = set(self.runtime.machines)
        counts = {(w, s): 0 for w in workflows for s in RUN_STATUSES}
        for workflow, status, n in store.run_groups("workflow_name"):
            counts[(workflow, status)] = n
            workflows.add(workflow)
        found: list[Reading] = [(RUNS, labels, float(n)) for labels, n in sorted(counts.items())]
        stuck_before = self.runtime.clock.now() - self.stuck_after_ms
        for workflow in sorted(workflows):
            matching = store.count_matching(
                RunQuery(workflow_name=workflow, stuck_before=stuck_before)
            )
            found.append((STUCK_RUNS, (workflow,), float(sum(matching.values()))))
        for name in sorted(breaker_names(self.runtime)):
            record = store.get_breaker(name)
            state = CLOSED if record is None else record.state
            found += [
                (BREAKER_STATE, (name, s), float(s == state)) for s in (CLOSED, OPEN, HALF_OPEN)
            ]
        now = self.runtime.clock.now()
        usage = {u.name: u for u in store.capacity_usage(now)}
        for name in sorted(set(self.runtime.load.limits) | set(usage)):
            used = usage.get(name, LimitUsage(name))
            found.append((LIMIT_IN_FLIGHT, (name,), float(used.in_flight)))
            found += [
                (RUNS_WAITING, (name, reason), float(n))
                for reason, n in sorted(used.waiting.items())
            ]
            paused = 0.0 if used.paused_until is None else (used.paused_until - now) / 1000
            found.append((LIMIT_PAUSED, (name,), paused))
        return found


def breaker_names(runtime: GaugedRuntime) -> set[str]:
    """The breakers a runtime's machines name on their invokes, and those given a policy."""
    names = set(runtime.breaker_policies)
    for machine in runtime.machines.values():
        for node in machine.definition.nodes:
            names.update(i.breaker for i in node.invoke if i.breaker)
    return names


class PrometheusMetrics:
    """The instruments in a `prometheus_client` registry (a new one unless given), with the
    store's gauges when `gauges` is given. `serve(port)` exposes the registry over HTTP."""

    def __init__(
        self, registry: CollectorRegistry | None = None, gauges: StoreGauges | None = None
    ) -> None:
        try:
            import prometheus_client as prom
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise ImportError(
                "Prometheus metrics need prometheus-client: pip install 'statecharts[metrics]'"
            ) from exc
        self.registry = registry if registry is not None else prom.CollectorRegistry()
        self._instruments: dict[str, Any] = {}
        for metric in INSTRUMENTS:
            if metric.kind == "counter":
                made: Any = prom.Counter(
                    metric.name, metric.help, metric.labels, registry=self.registry
                )
            else:
                made = prom.Histogram(
                    metric.name,
                    metric.help,
                    metric.labels,
                    buckets=_BUCKETS.get(metric.name, DURATION_BUCKETS),
                    registry=self.registry,
                )
            self._instruments[metric.name] = made
        if gauges is not None:
            self.registry.register(_GaugeCollector(gauges))  # type: ignore[arg-type]

    def add(self, metric: Metric, amount: float, labels: tuple[str, ...]) -> None:
        """Increment a counter."""
        self._instruments[metric.name].labels(*labels).inc(amount)

    def record(self, metric: Metric, value: float, labels: tuple[str, ...]) -> None:
        """Observe a histogram value."""
        self._instruments[metric.name].labels(*labels).observe(value)

    def serve(self, port: int, host: str = "127.0.0.1") -> tuple[Any, threading.Thread]:
        """Serve `/metrics` (Prometheus text format) on `host:port` from a daemon thread; returns
        (server, thread). `port` 0 picks a free port (`server.server_port`)."""
        import prometheus_client as prom

        return prom.start_http_server(port, host, registry=self.registry)


class _GaugeCollector:
    """A `prometheus_client` collector over `StoreGauges` (read at scrape time, cached)."""

    def __init__(self, gauges: StoreGauges) -> None:
        self.gauges = gauges

    def describe(self) -> Iterable[Any]:
        return []  # not known before the first read; registering must not touch the store

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        families = {m.name: GaugeMetricFamily(m.name, m.help, labels=m.labels) for m in GAUGES}
        for metric, labels, value in self.gauges.readings():
            families[metric.name].add_metric(labels, value)
        yield from families.values()


class OtelMetrics:
    """The instruments as OpenTelemetry counters, histograms and (with `gauges`) observable
    gauges, from `meter_provider` (default: the global one, a no-op until an SDK is set)."""

    def __init__(
        self, meter_provider: MeterProvider | None = None, gauges: StoreGauges | None = None
    ) -> None:
        from opentelemetry import metrics as otel_metrics

        meter = otel_metrics.get_meter("statecharts", meter_provider=meter_provider)
        self._instruments: dict[str, Any] = {}
        for metric in INSTRUMENTS:
            create = meter.create_counter if metric.kind == "counter" else meter.create_histogram
            self._instruments[metric.name] = create(
                metric.name, unit=metric.unit, description=metric.help
            )
        if gauges is not None:
            for metric in GAUGES:
                meter.create_observable_gauge(
                    metric.name, [self._observe(gauges, metric)], description=metric.help
                )

    @staticmethod
    def _observe(gauges: StoreGauges, metric: Metric) -> Callable[[Any], Iterable[Observation]]:
        from opentelemetry.metrics import Observation

        def callback(options: Any) -> Iterable[Observation]:
            return [
                Observation(value, dict(zip(m.labels, labels, strict=True)))
                for m, labels, value in gauges.readings()
                if m is metric
            ]

        return callback

    def add(self, metric: Metric, amount: float, labels: tuple[str, ...]) -> None:
        """Add to a counter."""
        self._instruments[metric.name].add(amount, dict(zip(metric.labels, labels, strict=True)))

    def record(self, metric: Metric, value: float, labels: tuple[str, ...]) -> None:
        """Record a histogram value."""
        self._instruments[metric.name].record(value, dict(zip(metric.labels, labels, strict=True)))


def fan_out(sinks: Sequence[MetricsSink]) -> MetricsSink | None:
    """One sink writing to all of `sinks` (None for none: callers then skip the work)."""
    if not sinks:
        return None
    if len(sinks) == 1:
        return sinks[0]
    return _Both(tuple(sinks))


class _Both:
    def __init__(self, sinks: tuple[MetricsSink, ...]) -> None:
        self.sinks = sinks

    def add(self, metric: Metric, amount: float, labels: tuple[str, ...]) -> None:
        for sink in self.sinks:
            sink.add(metric, amount, labels)

    def record(self, metric: Metric, value: float, labels: tuple[str, ...]) -> None:
        for sink in self.sinks:
            sink.record(metric, value, labels)
