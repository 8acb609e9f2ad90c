"""One trace from a webhook start, across a durable timer, a SIGKILLed worker and a takeover,
to completion: every step and effect span present, parented or linked as docs/observability.md
says.

The test process is the webhook (a real HTTP server on loopback whose handler starts the run
inside its request span) and the client that later sends CONFIRM; its spans go to the SDK's
in-memory exporter. The two workers are real `statecharts worker --otlp` subprocesses exporting
to a loopback OTLP/HTTP collector run by the test; the first is SIGKILLed inside a call.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from persistence import open_store
from persistence.runtime import Runtime
from persistence.telemetry import Telemetry
from statecharts import tracing
from tests.telemetry import workflows
from tests.telemetry.collector import Collector, Span

LEASE_MS = 1000
WAIT_S = 40.0


def _until(what: str, check: object, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"not reached within {timeout}s: {what}")
        time.sleep(0.05)


def _worker(
    url: str, name: str, endpoint: str, calls: Path, log: Path, block: bool
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_RESOURCE_ATTRIBUTES": f"worker={name}",
        "OTEL_METRIC_EXPORT_INTERVAL": "600000",
        workflows.CALLS_ENV: str(calls),
        workflows.BLOCK_ENV: "1" if block else "0",
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "persistence.cli",
            "worker",
            "--store",
            url,
            "--machines",
            "tests.telemetry.workflows",
            "--lease-ms",
            str(LEASE_MS),
            "--poll-ms",
            "50",
            "--otlp",
            "--log-level",
            "INFO",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )


def _webhook(runtime: Runtime, tracer: trace.Tracer) -> ThreadingHTTPServer:
    """POST /signup?user=NAME starts a run inside the request's server span."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            parent = TraceContextTextMapPropagator().extract(
                {k.lower(): v for k, v in self.headers.items()}
            )
            with tracer.start_as_current_span(
                "POST /signup", context=parent, kind=trace.SpanKind.SERVER
            ):
                user = self.path.split("user=", 1)[1]
                run_id = runtime.start("signup", {"user": user}, key=user).encode()
            self.send_response(201)
            self.send_header("Content-Length", str(len(run_id)))
            self.end_headers()
            self.wfile.write(run_id)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


def test_one_trace_across_a_timer_a_sigkill_and_a_takeover(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    calls = tmp_path / "calls.txt"
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    store = open_store(url, migrate=True)
    # CONFIRM is queued for worker B (a send to a run at rest would apply it here, its step
    # span exported by this process: tests/persistence/test_send_step.py)
    runtime = Runtime(
        store, [workflows.signup], telemetry=Telemetry(tracer_provider=provider), step_in_send=False
    )
    server = _webhook(runtime, tracer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with Collector() as collector:
            # the client's request: its traceparent header is the trace the run joins
            with tracer.start_as_current_span("client signup", kind=trace.SpanKind.CLIENT):
                headers: dict[str, str] = {}
                TraceContextTextMapPropagator().inject(headers)
                request = urllib.request.Request(
                    f"http://127.0.0.1:{server.server_port}/signup?user=ada",
                    b"",
                    headers,
                    method="POST",
                )
                with urllib.request.urlopen(request, timeout=10) as response:
                    run_id = response.read().decode()

            def spans_of_run() -> list[Span]:
                return [
                    s for s in collector.snapshot() if s.attributes.get(tracing.RUN_ID) == run_id
                ]

            def steps_from(worker: str) -> list[Span]:
                return [
                    s
                    for s in spans_of_run()
                    if s.name == "step signup" and s.resource.get("worker") == worker
                ]

            a = _worker(url, "A", collector.endpoint, calls, tmp_path / "a.log", block=True)
            processes.append(a)
            _until(
                "worker A inside send_welcome", lambda: "send_welcome " in _text(calls)
            )  # the run's only mail
            # A committed every step up to the timer's (into welcoming): all exported
            _until(
                "A's steps exported",
                lambda: any(
                    s.attributes.get(tracing.STATE_AFTER) == "welcoming" for s in steps_from("A")
                ),
            )
            a.kill()
            a.wait(timeout=10)
            b = _worker(url, "B", collector.endpoint, calls, tmp_path / "b.log", block=False)
            processes.append(b)
            _until(
                "B took the run over and reached confirming",
                lambda: store.get_run(run_id).state == "confirming",
            )
            with tracer.start_as_current_span(
                "POST /confirm", kind=trace.SpanKind.SERVER
            ) as confirm:
                runtime.send(run_id, "CONFIRM")
            _until(
                "the run ended",
                lambda: (
                    store.get_run(run_id).status == "done"
                    and not store.list_effects(run_id, "pending")
                ),
            )
            final = store.get_run(run_id)

            def b_versions() -> set[int]:
                return {s.attributes.get(tracing.RUN_VERSION) for s in steps_from("B")}

            # (B's exporter sends its spans in batches, after the steps' commits)
            _until("B exported a step", lambda: bool(steps_from("B")))
            first_b = min(s.attributes[tracing.RUN_VERSION] for s in steps_from("B"))
            wanted = set(range(first_b, final.version + 1))
            _until(
                f"B exported every step {sorted(wanted)}: "
                f"{[(s.name, dict(s.attributes), s.resource) for s in spans_of_run()]}",
                lambda: b_versions() >= wanted,
            )
            b.send_signal(signal.SIGTERM)
            b.wait(timeout=20)
            received = spans_of_run()
    finally:
        server.shutdown()
        server.server_close()
    local = {s.name: s for s in exporter.get_finished_spans()}
    client, webhook, start = local["client signup"], local["POST /signup"], local["start signup"]
    send = local["send CONFIRM"]
    trace_id = f"{client.context.trace_id:032x}"
    start_id = f"{start.context.span_id:016x}"

    # the webhook's request span is the run's parent; the run's trace is the client's
    assert webhook.parent.span_id == client.context.span_id
    assert start.parent.span_id == webhook.context.span_id
    assert start.attributes[tracing.RUN_ID] == run_id
    assert (final.traceparent or "").startswith(f"00-{trace_id}-{start_id}-")

    steps = sorted(
        (s for s in received if s.name == "step signup"),
        key=lambda s: s.attributes[tracing.RUN_VERSION],
    )
    # every committed step has exactly one span, all children of the stored start span
    assert [s.attributes[tracing.RUN_VERSION] for s in steps] == list(range(2, final.version + 1))
    assert {s.trace_id for s in received} == {trace_id}
    assert {s.parent_id for s in steps} == {start_id}
    assert all(s.attributes["statecharts.step.committed"] for s in steps)
    by_version = {s.attributes[tracing.RUN_VERSION]: s for s in steps}
    assert {by_version[v].resource["worker"] for v in range(2, first_b)} == {"A"}
    assert {by_version[v].resource["worker"] for v in range(first_b, final.version + 1)} == {"B"}
    assert (
        by_version[2].attributes[tracing.STATE_BEFORE],
        by_version[2].attributes[tracing.STATE_AFTER],
    ) == ("registering", "cooling_off")
    (timer_step,) = [s for s in steps if s.attributes.get(tracing.STATE_AFTER) == "welcoming"]
    assert timer_step.attributes[tracing.EVENTS][0].startswith("xstate.after")
    assert timer_step.start_ns - by_version[2].end_ns >= workflows.TIMER_MS * 1_000_000 * 0.9
    assert timer_step.resource["worker"] == "A"
    # A was killed inside the call send_welcome, which runs beside the run (the run is at
    # rest, unleased): B took the call over once A's lease on it expired, and B's first step
    # is the one that applied its result; no run lease was taken over
    takeover = by_version[first_b]
    assert takeover.attributes[tracing.EVENTS] == ["xstate.done.actor.welcome"]
    assert takeover.attributes[tracing.STATE_BEFORE] == "welcoming"
    assert not any(by_version[v].attributes.get(tracing.TAKEOVER) for v in by_version)
    (welcome_call,) = [c for c in store.list_calls(run_id) if c.call_id == "welcome"]
    welcome_attempts = [
        t for t in store.call_attempts(run_id) if t.idempotency_key == welcome_call.idempotency_key
    ]
    assert [t.outcome for t in welcome_attempts] == ["lost", "done"]
    assert f":{a.pid}:" in welcome_attempts[0].worker
    assert f":{b.pid}:" in welcome_attempts[1].worker
    # the step that applied CONFIRM links to the send span of the second request's trace
    (applied,) = [s for s in steps if "CONFIRM" in s.attributes.get(tracing.EVENTS, [])]
    assert applied.links == ((f"{confirm.context.trace_id:032x}", f"{send.context.span_id:016x}"),)
    assert send.parent.span_id == confirm.context.span_id

    # every effect the store recorded as done has one span, a child of the step that ran it;
    # every call that ended done has one span (the attempt that ended), a child of the run's
    # stored context (it ran beside the run, between two steps)
    effects = {
        s.attributes[tracing.EFFECT_KEY]: s for s in received if tracing.EFFECT_KEY in s.attributes
    }
    done = [e.idempotency_key for e in store.list_effects(run_id) if e.status == "done"]
    called = [c.idempotency_key for c in store.list_calls(run_id) if c.status == "done"]
    assert sorted(effects) == sorted(done + called)
    step_ids = {s.span_id: s for s in steps}
    for key in done + called:
        span = effects[key]
        assert span.parent_id in step_ids if key in done else span.parent_id == start_id, key
        assert span.attributes[tracing.EFFECT_OUTCOME] == "done"
        assert span.attributes[tracing.EFFECT_NAME] in {
            "register",
            "keep_account",
            "send_welcome",
            "archive",
        }
    welcome = effects[welcome_call.idempotency_key]
    assert welcome.resource["worker"] == "B"
    # the call A was killed in ran twice (A, then B); only B's execution ended, so one span
    names = [line.split()[0] for line in _text(calls).splitlines()]
    assert names.count("send_welcome") == 2 and names.count("register") == 1
    assert names.count("archive") == 1
    store.close()


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""
