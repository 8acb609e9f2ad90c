"""Where traces begin and how they are linked, in one process on the in-memory store: explicit
traceparents, error workflows, scheduled starts, bad input, and the operator events seen by
the log, the metrics and the step's span at once."""

from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import generate_latest

from persistence.runtime import Runtime
from persistence.scheduling import ScheduledStart
from persistence.stores.memory import MemoryStore
from persistence.telemetry import Telemetry
from persistence.telemetry.metrics import PrometheusMetrics
from persistence.worker import Worker
from statecharts import SimulatedClock, create_machine, tracing

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _setup(*machines: object) -> tuple[Runtime, InMemorySpanExporter, PrometheusMetrics]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    store = MemoryStore()
    store.migrate()
    prometheus = PrometheusMetrics()
    runtime = Runtime(
        store,
        list(machines),
        clock=SimulatedClock(1_700_000_000_000),  # type: ignore[arg-type]
        telemetry=Telemetry(tracer_provider=provider, metrics=[prometheus]),
    )
    return runtime, exporter, prometheus


def _named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def _poison(input: object) -> int:
    return 2**70  # no store holds it exactly


failing = create_machine(
    {
        "id": "failing",
        "initial": "calling",
        "meta": {"error_workflow": "alert"},
        "states": {
            "calling": {"invoke": {"src": "poison", "onDone": "done"}},
            "done": {"type": "final"},
        },
    },
    actors={"poison": _poison},
)
alert = create_machine({"id": "alert", "initial": "sent", "states": {"sent": {"type": "final"}}})


def test_an_explicit_traceparent_is_the_runs_parent_and_a_bad_one_is_refused() -> None:
    runtime, exporter, _ = _setup(alert)
    run_id = runtime.start("alert", traceparent=TRACEPARENT)
    (start,) = _named(exporter, "start alert")
    assert f"{start.context.trace_id:032x}" == TRACEPARENT.split("-")[1]
    assert f"{start.parent.span_id:016x}" == TRACEPARENT.split("-")[2]
    assert runtime.get(run_id).traceparent.split("-")[2] == f"{start.context.span_id:016x}"
    with pytest.raises(ValueError, match="traceparent"):
        runtime.start("alert", traceparent="00-zz-yy-01")
    off = Runtime(runtime.store, [alert], telemetry=Telemetry.off())
    assert off.get(off.start("alert")).traceparent is None  # no tracing: nothing invented
    assert off.get(off.start("alert", traceparent=TRACEPARENT)).traceparent == TRACEPARENT


def test_a_poisoned_value_fails_the_run_once_seen_by_log_metric_and_span(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runtime, exporter, prometheus = _setup(failing, alert)
    run_id = runtime.start("failing", key="k-1")
    with caplog.at_level(logging.WARNING, "statecharts.runs"):
        Worker(runtime).run_until_idle()
    assert runtime.get(run_id).status == "error"
    kinds = [getattr(r, "statecharts", {}).get("event") for r in caplog.records]
    assert kinds == ["poisoned_value", "run_failed"]
    assert all(
        r.statecharts["run_id"] == run_id and r.statecharts["key"] == "k-1" for r in caplog.records
    )
    text = generate_latest(prometheus.registry).decode()
    assert 'statecharts_poisoned_values_total{workflow="failing"} 1.0' in text
    assert 'statecharts_runs_finished_total{outcome="error",workflow="failing"} 1.0' in text
    assert 'statecharts_runs_started_total{workflow="alert"} 1.0' in text  # its error workflow
    (step,) = [
        s
        for s in _named(exporter, "step failing")
        if s.attributes.get(tracing.RUN_STATUS) == "error"
    ]
    # the call ran beside the run: its refused value failed the call (reported when it ended,
    # outside any step), and the step that applied that failure failed the run
    assert [e.name for e in step.events] == ["run_failed"]
    assert "StoreEncodingError" in step.events[0].attributes["reason"]
    assert step.status.status_code.name == "ERROR"
    # the error workflow begins a trace of its own, linked to the failed run's (a send that
    # would fail the run leaves it to a worker's step: the call's end, stepped in its send,
    # prepared the error workflow's start once more and dropped it; the run started is one)
    alert_run = runtime.store.find_run("alert", f"error-of:{run_id}") or next(
        r for r in runtime.list(name="alert")
    )
    assert [r.id for r in runtime.list(name="alert")] == [alert_run.id]
    (failed_start,) = _named(exporter, "start failing")
    (alert_start,) = [
        s for s in _named(exporter, "start alert") if s.attributes[tracing.RUN_ID] == alert_run.id
    ]
    assert alert_start.parent is None
    assert alert_start.context.trace_id != failed_start.context.trace_id
    assert [link.context.span_id for link in alert_start.links] == [failed_start.context.span_id]
    assert alert_run.traceparent is not None
    assert alert_run.traceparent.split("-")[1] == f"{alert_start.context.trace_id:032x}"


def test_a_scheduled_start_is_a_new_trace() -> None:
    runtime, exporter, _ = _setup(alert)
    schedule = ScheduledStart(runtime, "every-minute", "alert", "* * * * *")
    runtime.clock.advance(120_000)  # type: ignore[attr-defined]
    fired = [schedule.tick() for _ in range(3)]
    started = [f for f in fired if f is not None]
    assert len(started) >= 1
    for span in _named(exporter, "start alert"):
        assert span.parent is None and span.attributes[tracing.RUN_ID] in started
