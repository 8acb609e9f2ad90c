"""Tracing: the spans statecharts emits, their names and attributes, and the W3C trace context.

One vocabulary for every runner. A **start** span when a machine starts (a durable run is
created), a **send** span when an event is queued for a durable run, a **step** span per step
(one event, timer or batch of call results applied: the durable runtime's step, an in-memory
actor's macrostep) and an **effect** span per effect executed (a user action, an invoked
call, an emitted event), a child of its step. `persistence.telemetry` emits them for durable
runs; `tracing_inspector()` emits them for in-memory actors through the inspection hook.

OpenTelemetry's API is optional (the `otel` extra): without it `get_tracer()` is None and
nothing here costs anything; with the API but no SDK configured every span would be
OpenTelemetry's no-op span and nothing is exported (`recording_provider` tells the two apart,
so that durable runs skip building spans until an SDK's provider is set). Trace context is
the W3C `traceparent` header (`00-<trace id>-<span id>-<flags>`), which durable runs store with
the run and each queued event.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .inspection import InspectionEvent, Inspector

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer, TracerProvider

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace as otel_trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the `otel` extra is not installed: no tracing, no cost
    otel_trace = None  # type: ignore[assignment]
    otel_context = None  # type: ignore[assignment]
    TraceContextTextMapPropagator = None  # type: ignore[assignment,misc]

TRACER_NAME = "statecharts"

# Attribute keys (one namespace; the values are strings, integers, booleans or string lists).
WORKFLOW = "statecharts.workflow"
WORKFLOW_VERSION = "statecharts.workflow.version"
RUN_ID = "statecharts.run.id"
RUN_KEY = "statecharts.run.key"
RUN_STATUS = "statecharts.run.status"
RUN_VERSION = "statecharts.run.version"
STATE_BEFORE = "statecharts.state.before"
STATE_AFTER = "statecharts.state.after"
ATTEMPT = "statecharts.attempt"
BATCH_SIZE = "statecharts.batch.size"
EVENTS = "statecharts.events"
EVENT_TYPE = "statecharts.event.type"
TAKEOVER = "statecharts.takeover"
PREVIOUS_OWNER = "statecharts.lease.previous_owner"
EFFECT_KIND = "statecharts.effect.kind"
EFFECT_NAME = "statecharts.effect.name"
EFFECT_KEY = "statecharts.effect.idempotency_key"
EFFECT_OUTCOME = "statecharts.effect.outcome"
EFFECT_ATTEMPT = "statecharts.effect.attempt"

TRACED_EFFECT_KINDS = frozenset({"action", "start_child", "emit", "send_to", "send_parent"})
"""Effects that reach outside the machine and get an effect span (the kinds a durable run
records in its outbox, and the messages to other actors, which a durable run writes with its
step; timers and log lines are part of the step)."""

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def start_span_name(workflow: str) -> str:
    """`start <workflow>`: a run (or actor) of the workflow begins."""
    return f"start {workflow}"


def send_span_name(workflow: str) -> str:
    """`send <workflow>`: an event is queued for a run of the workflow."""
    return f"send {workflow}"


def step_span_name(workflow: str) -> str:
    """`step <workflow>`: one step of a run."""
    return f"step {workflow}"


def effect_span_name(kind: str, name: str) -> str:
    """`<kind> <name>`, e.g. `start_child chargeCard` or `action sendReceipt`."""
    return f"{kind} {name}"


def effect_name(kind: str, fields: Mapping[str, Any]) -> str:
    """The name an effect is known by (action type, invoked actor's `src`, emitted event type,
    message target), from its JSON record or its attributes."""
    if kind == "action":
        return str(fields.get("type"))
    if kind == "start_child":
        return str(fields.get("src"))
    if kind == "emit":
        event = fields.get("event") or {}
        return str(event.get("type")) if isinstance(event, Mapping) else str(event)
    if kind == "send_to":
        return str(fields.get("target"))
    return "#parent" if kind == "send_parent" else kind


def check_traceparent(value: str, name: str = "traceparent") -> str:
    """`value` if it is a valid W3C traceparent (version 00, non-zero ids), else ValueError
    naming `name`."""
    match = _TRACEPARENT.match(value)
    if (
        match is None
        or match.group(1) == "ff"
        or set(match.group(2)) == {"0"}
        or set(match.group(3)) == {"0"}
    ):
        raise ValueError(
            f"{name}: {value!r} is not a W3C traceparent "
            "('00-<32 hex trace id>-<16 hex span id>-<2 hex flags>')"
        )
    return value


def valid_traceparent(value: str | None) -> str | None:
    """`value` when it is a valid W3C traceparent, else None: an incoming header that is not
    one is ignored, as the W3C Trace Context recommendation says (a new trace is started)."""
    if value is None:
        return None
    try:
        return check_traceparent(value.strip())
    except ValueError:
        return None


def trace_id_of(traceparent: str | None) -> str | None:
    """The 32-hex trace id in a traceparent (None for None or an invalid value)."""
    if traceparent is None:
        return None
    match = _TRACEPARENT.match(traceparent)
    return match.group(2) if match else None


def available() -> bool:
    """True when OpenTelemetry's API is installed."""
    return otel_trace is not None


def get_tracer(provider: TracerProvider | None = None) -> Tracer | None:
    """statecharts' tracer from `provider` (default: the global one, a no-op until an SDK is
    configured); None when the API is not installed."""
    if otel_trace is None:
        return None
    return otel_trace.get_tracer(TRACER_NAME, tracer_provider=provider)


def recording_provider(provider: TracerProvider | None = None) -> bool:
    """Whether spans from `provider` (default, or OpenTelemetry's proxy: the global provider)
    can be recorded: False for the API's no-op provider and for the global proxy while no SDK
    has set a global provider (until then its spans are no-op spans); False without the API.
    The global provider is set once and never unset, so a True answer holds for good."""
    if otel_trace is None:
        return False
    if provider is None or isinstance(provider, otel_trace.ProxyTracerProvider):
        provider = otel_trace.get_tracer_provider()  # (reads OTEL_PYTHON_TRACER_PROVIDER too)
    return not isinstance(provider, otel_trace.ProxyTracerProvider | otel_trace.NoOpTracerProvider)


def traceparent_of(span: Span) -> str | None:
    """The traceparent naming `span` (None for OpenTelemetry's invalid span)."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def context_of(traceparent: str | None) -> Context | None:
    """An OpenTelemetry context whose parent is the remote span `traceparent` names (None when
    there is none or the API is missing)."""
    if traceparent is None or TraceContextTextMapPropagator is None:
        return None
    return TraceContextTextMapPropagator().extract({"traceparent": traceparent})


def link_to(traceparent: str | None, **attributes: Any) -> list[Any]:
    """A one-element list with a span link to `traceparent` (empty if none)."""
    if traceparent is None or otel_trace is None:
        return []
    ctx = otel_trace.get_current_span(context_of(traceparent)).get_span_context()
    return [otel_trace.Link(ctx, attributes or None)] if ctx.is_valid else []


def current_traceparent() -> str | None:
    """The traceparent of the span current in this thread (None without one)."""
    if otel_trace is None:
        return None
    return traceparent_of(otel_trace.get_current_span())


def set_error(span: Span, description: str) -> None:
    """Mark `span` failed with `description`."""
    if otel_trace is not None:
        span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, description))


def attributes(**values: Any) -> dict[str, Any]:
    """Span attributes without the None values (OpenTelemetry drops None with a warning)."""
    return {k: v for k, v in values.items() if v is not None}


@contextmanager
def within(traceparent: str | None) -> Iterator[None]:
    """Make the remote span `traceparent` names current in this thread (nothing for None or
    without the API): what a no-op span in that trace would make current, for instrumented
    clients that propagate it and log lines that show its trace id."""
    if traceparent is None or otel_context is None:
        yield
        return
    context = context_of(traceparent)
    assert context is not None
    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)


@contextmanager
def current(span: Span) -> Iterator[None]:
    """Make `span` current in this thread (so user code's spans are its children)."""
    assert otel_context is not None and otel_trace is not None
    token = otel_context.attach(otel_trace.set_span_in_context(span))
    try:
        yield
    finally:
        otel_context.detach(token)


class _ActorSpans:
    """The open spans of one in-memory actor."""

    __slots__ = ("effect", "start", "step", "step_before")

    def __init__(self) -> None:
        self.start: Span | None = None
        self.step: Span | None = None
        self.step_before = ""
        self.effect: Span | None = None


def tracing_inspector(
    provider: TracerProvider | None = None, then: Inspector | None = None
) -> Inspector:
    """An inspector (`create_actor(machine, inspect=...)`) that emits statecharts' spans for an
    in-memory actor and its child actors: a start span when an actor starts (the child of the
    span current at that moment, or of the parent actor's open effect for a child machine), a
    step span per event or timer processed (child of the start span) and an effect span per
    action, invoke, emit or message (child of its step). `then` also receives every record.
    Without OpenTelemetry's API the inspector only forwards to `then`."""
    tracer = get_tracer(provider)
    if tracer is None:
        return then or (lambda record: None)
    lock = threading.Lock()
    actors: dict[str, _ActorSpans] = {}
    opened: list[Span] = []  # effect spans still open, newest last: a child actor's parent

    def end_effect(spans: _ActorSpans) -> None:
        if spans.effect is not None:
            spans.effect.end()
            opened.remove(spans.effect)
            spans.effect = None

    def end_step(spans: _ActorSpans, state: str | None) -> None:
        end_effect(spans)
        if spans.step is not None:
            if state is not None:
                spans.step.set_attribute(STATE_AFTER, state)
            spans.step.end()
            spans.step = None

    def begin_step(spans: _ActorSpans, actor_id: str, event_type: str | None) -> Span:
        if spans.step is None:
            parent = otel_trace.set_span_in_context(spans.start) if spans.start else None
            spans.step = tracer.start_span(
                step_span_name(actor_id),
                context=parent,
                attributes=attributes(
                    **{WORKFLOW: actor_id, EVENT_TYPE: event_type, STATE_BEFORE: spans.step_before}
                ),
            )
        return spans.step

    def inspect(record: InspectionEvent) -> None:
        with lock:
            spans = actors.setdefault(record.actor_id, _ActorSpans())
            kind = record.type
            if kind == "@xstate.actor":
                parent = otel_trace.set_span_in_context(opened[-1]) if opened else None
                spans.start = tracer.start_span(
                    start_span_name(record.actor_id),
                    context=parent,
                    attributes={WORKFLOW: record.actor_id},
                )
                spans.step = spans.start  # the initial macrostep belongs to the start span
            elif kind == "@xstate.event":
                end_step(spans, None)
                begin_step(spans, record.actor_id, _event_type(record.event))
            elif kind == "@xstate.microstep":
                begin_step(spans, record.actor_id, _event_type(record.event))
            elif kind == "@xstate.action":
                effect = record.action
                end_effect(spans)
                if getattr(effect, "kind", None) in TRACED_EFFECT_KINDS:
                    step = begin_step(spans, record.actor_id, None)
                    name = effect_name(effect.kind, _fields(effect))
                    spans.effect = tracer.start_span(
                        effect_span_name(effect.kind, name),
                        context=otel_trace.set_span_in_context(step),
                        attributes=attributes(
                            **{
                                EFFECT_KIND: effect.kind,
                                EFFECT_NAME: name,
                                EFFECT_KEY: getattr(effect, "key", None),
                                EFFECT_ATTEMPT: getattr(effect, "attempt", None),
                            }
                        ),
                    )
                    opened.append(spans.effect)
            elif kind == "@xstate.snapshot":
                snapshot = record.snapshot
                state = ",".join(snapshot.active_leaves())
                if snapshot.status == "error" and spans.step is not None:
                    set_error(spans.step, str(snapshot.error))
                end_step(spans, state)  # the start span ends with the initial macrostep
                spans.step_before = state
            elif kind == "@xstate.stopped":
                end_step(spans, None)
                del actors[record.actor_id]
        if then is not None:
            then(record)

    return inspect


def _event_type(event: Any) -> str | None:
    return str(event.get("type")) if isinstance(event, Mapping) else None


def _fields(effect: Any) -> Mapping[str, Any]:
    getter: Callable[[str], Any] = lambda name: getattr(effect, name, None)  # noqa: E731
    return {name: getter(name) for name in ("type", "src", "event", "target")}
