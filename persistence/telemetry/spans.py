"""Spans of durable runs, and how their trace is carried across days, workers and crashes.

The `start` span of a run is created where the run starts, as a child of the span current there
(for example the webhook's request span) or of an explicit `traceparent`; its own traceparent
is stored with the run. Every step of the run, whichever worker takes it and however long after,
is a child of that stored context: one run, one trace. A step's span covers executing the effects
the previous step recorded (one child span each, current while user code runs, so the spans of
instrumented clients nest under it), applying their results, due timers and queued events, and
the commit. An event sent to the run has a `send` span in the sender's trace; its traceparent
is stored with the queued event and the step that applies it links to it. A new trace begins
where no caller's context exists: scheduled starts, and error workflows (their start span links
to the failed run's trace).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statecharts import tracing as t

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

    from persistence.stores import InboxEvent, RunRecord, StepCommit
    from persistence.telemetry.events import RunEvent


@dataclass(slots=True)
class Started:
    """A start in progress: the traceparent to store with the run, and its span."""

    traceparent: str | None
    span: Span | None = None

    def run(self, run_id: str, created: bool) -> None:
        """Name the run that was started (or found, when `created` is False)."""
        if self.span is not None and self.span.is_recording():
            self.span.set_attributes({t.RUN_ID: run_id, "statecharts.run.created": created})


class RunSpans:
    """Start, send, step and effect spans from `tracer`, the open step spans by run id."""

    def __init__(self, tracer: Tracer) -> None:
        from opentelemetry.trace import SpanKind

        self.tracer = tracer
        self._kinds = SpanKind
        self._open: dict[str, Span] = {}
        self._lock = threading.Lock()

    @contextmanager
    def start(
        self, workflow: str, key: str | None, traceparent: str | None, link: str | None = None
    ) -> Iterator[Started]:
        """The `start` span (current inside the block) of a run of `workflow`."""
        with self.tracer.start_as_current_span(
            t.start_span_name(workflow),
            context=t.context_of(traceparent),
            kind=self._kinds.PRODUCER,
            links=t.link_to(link),
            attributes=t.attributes(**{t.WORKFLOW: workflow, t.RUN_KEY: key}),
        ) as span:
            yield Started(t.traceparent_of(span) or traceparent, span)

    @contextmanager
    def send(self, run_id: str, event_type: str, traceparent: str | None) -> Iterator[str | None]:
        """The `send` span of an event for run `run_id`; yields the traceparent to queue."""
        with self.tracer.start_as_current_span(
            t.send_span_name(event_type),
            context=t.context_of(traceparent),
            kind=self._kinds.PRODUCER,
            attributes={t.RUN_ID: run_id, t.EVENT_TYPE: event_type},
        ) as span:
            yield t.traceparent_of(span) or traceparent

    def begin_step(
        self,
        run: RunRecord,
        state: str,
        first: bool,
        batch: int,
        attempt: int,
        inbox: Sequence[InboxEvent],
        start_ns: int | None = None,
    ) -> None:
        """Open the step span of `run` (child of its stored trace context), started at
        `start_ns` (epoch ns) when given, else now."""
        links = [
            link
            for e in inbox
            for link in t.link_to(e.traceparent, **{t.EVENT_TYPE: str(e.event.get("type"))})
        ]
        takeover = first and run.previous_owner is not None
        span = self.tracer.start_span(
            t.step_span_name(run.workflow_name),
            context=t.context_of(run.traceparent),
            kind=self._kinds.CONSUMER,
            links=links,
            attributes=t.attributes(
                **{
                    t.WORKFLOW: run.workflow_name,
                    t.WORKFLOW_VERSION: run.workflow_version,
                    t.RUN_ID: run.id,
                    t.RUN_KEY: run.key,
                    t.STATE_BEFORE: state,
                    t.ATTEMPT: attempt,
                    t.BATCH_SIZE: batch,
                    t.TAKEOVER: takeover,
                    t.PREVIOUS_OWNER: run.previous_owner if takeover else None,
                }
            ),
            start_time=start_ns,
        )
        with self._lock:
            self._open[run.id] = span

    @contextmanager
    def effect(
        self,
        run_id: str,
        kind: str,
        name: str,
        key: str,
        attempt: int | None,
        beside: tuple[str | None] | None = None,
    ) -> Iterator[Callable[[str, str | None], None]]:
        """An effect span (child of the run's open step span, current inside the block); the
        block calls the yielded function with the outcome ("done", "failed", "skipped") and the
        error text. `beside`: (the run's stored traceparent,) for a call that runs beside its
        run, outside any step: its span is that context's child, as the run's steps are."""
        if beside is not None:
            parent = t.context_of(beside[0])
        else:
            with self._lock:
                step = self._open.get(run_id)
            parent = None if step is None else _in(step)
        with self.tracer.start_as_current_span(
            t.effect_span_name(kind, name),
            context=parent,
            attributes=t.attributes(
                **{
                    t.RUN_ID: run_id,
                    t.EFFECT_KIND: kind,
                    t.EFFECT_NAME: name,
                    t.EFFECT_KEY: key,
                    t.EFFECT_ATTEMPT: attempt,
                }
            ),
            record_exception=False,
            set_status_on_exception=True,
        ) as span:

            def outcome(status: str, error: str | None) -> None:
                if span.is_recording():
                    span.set_attribute(t.EFFECT_OUTCOME, status)
                    if status == "failed":
                        t.set_error(span, error or "failed")

            yield outcome

    def end_step(self, run_id: str, commit: StepCommit | None, version: int | None) -> None:
        """Close `run_id`'s step span: what the step committed, or that it committed nothing."""
        with self._lock:
            span = self._open.pop(run_id, None)
        if span is None:
            return
        if span.is_recording():
            committed = commit is not None and version is not None
            span.set_attribute("statecharts.step.committed", committed)
            if commit is not None and version is not None:
                span.set_attributes(
                    t.attributes(
                        **{
                            t.STATE_AFTER: commit.state,
                            t.RUN_VERSION: version,
                            t.RUN_STATUS: commit.status,
                            t.EVENTS: [str(j.event.get("type")) for j in commit.journal] or None,
                        }
                    )
                )
                if commit.status == "error":
                    t.set_error(span, commit.last_error or "run failed")
        span.end()

    def annotate(self, event: RunEvent) -> None:
        """Add an operator event to the run's open step span (if this process has one)."""
        with self._lock:
            span = self._open.get(event.run_id)
        if span is None or not span.is_recording():
            return
        span.add_event(
            event.kind,
            t.attributes(
                **{
                    k: v if isinstance(v, str | int | float | bool) else str(v)
                    for k, v in event.fields.items()
                    if v is not None
                }
            ),
        )
        if event.kind == "run_failed":
            t.set_error(span, str(event.fields.get("reason") or "run failed"))


def _in(span: Span) -> Any:
    from opentelemetry.trace import set_span_in_context

    return set_span_in_context(span)


def elapsed_since(started: float) -> float:
    """Seconds since `started` (a `time.perf_counter()` value)."""
    return time.perf_counter() - started
