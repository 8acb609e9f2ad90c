"""Tracing on (the default) with OpenTelemetry's API but no SDK configured yet: no spans are
built, yet the caller's trace context is kept with the run, is current while its effects run,
and an SDK's tracer provider set globally after the runtime was made is noticed at once and
continues that trace. On a SQLite file, stepped in the caller (`Inline`) and by a worker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once
from prometheus_client import generate_latest

from persistence import open_store
from persistence.inline import Inline
from persistence.runtime import Runtime
from persistence.telemetry import Telemetry
from persistence.telemetry.metrics import PrometheusMetrics
from persistence.worker import Worker
from statecharts import create_machine, tracing

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
CURRENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def no_global_provider() -> Iterator[None]:
    """OpenTelemetry's global tracer provider unset for the test (it is set once per process,
    so the test puts back whatever was there)."""
    saved = trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE
    trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = None, Once()
    try:
        yield
    finally:
        trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = saved


def _machine(seen: list[tuple[str, str | None]]) -> Any:
    """call -> wait for GO -> call again -> done; each call notes the traceparent current in
    it."""

    def note(name: str) -> Any:
        def call(input: object) -> str:
            seen.append((name, tracing.current_traceparent()))
            return name

        return call

    return create_machine(
        {
            "id": "greet",
            "initial": "hello",
            "states": {
                "hello": {"invoke": {"src": "hello", "onDone": "waiting"}},
                "waiting": {"on": {"GO": "bye"}},
                "bye": {"invoke": {"src": "bye", "onDone": "done"}},
                "done": {"type": "final"},
            },
        },
        actors={"hello": note("hello"), "bye": note("bye")},
    )


def test_without_an_sdk_the_trace_is_kept_and_a_provider_set_later_continues_it(
    tmp_path: Path, no_global_provider: None
) -> None:
    seen: list[tuple[str, str | None]] = []
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}", migrate=True)
    prometheus = PrometheusMetrics()
    runtime = Runtime(store, [_machine(seen)], telemetry=Telemetry(metrics=[prometheus]))
    assert runtime.telemetry.recording() is None  # API, no SDK: no spans are built
    inline = Inline(runtime)

    # an explicit traceparent, and the span current in the caller, are stored with the run
    given = inline.run("greet", traceparent=TRACEPARENT)
    token = otel_context.attach(tracing.context_of(CURRENT))  # e.g. a request's remote parent
    try:
        current = inline.run("greet")
    finally:
        otel_context.detach(token)
    assert (given.status, current.status) == ("active", "active")  # waiting for GO
    assert runtime.get(given.run_id).traceparent == TRACEPARENT
    assert runtime.get(current.run_id).traceparent == CURRENT
    # the run's context is current while its calls run (what a no-op span makes current)
    assert seen == [("hello", TRACEPARENT), ("hello", CURRENT)]
    text = generate_latest(prometheus.registry).decode()
    assert 'statecharts_steps_total{workflow="greet"} 2.0' in text  # metrics still counted
    assert 'statecharts_runs_started_total{workflow="greet"} 2.0' in text

    # an SDK configured now, after the runtime was made, is noticed by the next step
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    runtime.send(given.run_id, {"type": "GO"})
    Worker(runtime).run_until_idle()
    assert runtime.get(given.run_id).status == "done"
    steps = [s for s in exporter.get_finished_spans() if s.name == "step greet"]
    assert len(steps) == 2  # the send's own step, then the worker's
    trace_id, parent_id = TRACEPARENT.split("-")[1:3]
    for step in steps:  # children of the context stored before the SDK was there
        assert f"{step.context.trace_id:032x}" == trace_id
        assert step.parent is not None and f"{step.parent.span_id:016x}" == parent_id
    # the call runs beside the run, between the step that recorded it and the step that
    # applies its result: its span is in the run's trace, a child of its stored context
    (bye,) = [s for s in exporter.get_finished_spans() if s.name == "start_child bye"]
    assert f"{bye.context.trace_id:032x}" == trace_id
    assert bye.parent is not None and f"{bye.parent.span_id:016x}" == parent_id
    assert seen[-1] == ("bye", tracing.traceparent_of(bye))  # the call ran inside its span

    # and a run started now has its start span, stored as its parent
    later = inline.run("greet")
    (start,) = [s for s in exporter.get_finished_spans() if s.name == "start greet"]
    assert runtime.get(later.run_id).traceparent == tracing.traceparent_of(start)
    assert runtime.telemetry.recording() is not None
    store.close()


def test_tracing_off_stores_only_an_explicit_traceparent(
    tmp_path: Path, no_global_provider: None
) -> None:
    seen: list[tuple[str, str | None]] = []
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}", migrate=True)
    inline = Inline(Runtime(store, [_machine(seen)], telemetry=Telemetry.off()))
    token = otel_context.attach(tracing.context_of(CURRENT))
    try:
        quiet = inline.run("greet")
        given = inline.run("greet", traceparent=TRACEPARENT)
    finally:
        otel_context.detach(token)
    assert inline.runtime.get(quiet.run_id).traceparent is None
    assert inline.runtime.get(given.run_id).traceparent == TRACEPARENT
    assert seen == [("hello", CURRENT), ("hello", CURRENT)]  # the caller's context, untouched
    store.close()
