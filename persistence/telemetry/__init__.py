"""Telemetry of durable runs: spans, metrics and the operator's log lines, from one set of hooks.

The runtime, its workers' drivers and the CLI call a `Telemetry` at the points that matter (a
run started, an event sent, a step begun and committed, an effect executed, a run claimed, an
operator event reported). Each hook feeds whatever is configured: OpenTelemetry spans (on by
default when the API is installed; built only once the application has configured an SDK's
tracer provider, before or after the runtime was made), metrics sinks (Prometheus,
OpenTelemetry), the log line. `Telemetry.off()` turns everything but the log lines off.

With the API but no SDK, OpenTelemetry's spans would all be no-op spans: the hooks skip them
and keep only what those spans would have done that anyone can see: the caller's trace context
(an explicit `traceparent`, else the span current where a run is started or an event sent) is
stored with the run or the event, so a worker or an SDK configured later continues that trace,
and the run's stored context is current while its effects execute (for clients that propagate
it and log lines that show its trace id).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from persistence.telemetry import events, metrics
from persistence.telemetry.events import RunEvent
from persistence.telemetry.metrics import MetricsSink, fan_out
from persistence.telemetry.spans import RunSpans, Started
from statecharts.tracing import (
    check_traceparent,
    current_traceparent,
    effect_name,
    get_tracer,
    recording_provider,
    within,
)

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from persistence.stores import InboxEvent, RunRecord, StepCommit

__all__ = ["RunEvent", "Telemetry"]

_EVENT_COUNTERS = {
    events.RETRY_SCHEDULED: metrics.RETRIES_SCHEDULED,
    events.TAKEOVER: metrics.LEASE_TAKEOVERS,
    events.DEAD_LETTER: metrics.DEAD_LETTERS,
    events.POISONED_VALUE: metrics.POISONED_VALUES,
    events.LEASE_LOST: metrics.LEASES_LOST,
}


def _no_outcome(status: str, error: str | None) -> None:
    del status, error


UNOBSERVED = nullcontext(_no_outcome)
"""`Telemetry.effect` where there is nothing to observe (reusable: it holds no state); an
executor may then run the effect without entering it."""


class Telemetry:
    """Where a runtime reports what its runs do.

    `tracing`: emit spans through OpenTelemetry's API (from `tracer_provider`, default the
    global one) when it is installed, once the provider records them (an SDK's: the global one
    may be set later). `metrics`: sinks for counters and histograms, e.g.
    `PrometheusMetrics()` or `OtelMetrics()`.
    """

    def __init__(
        self,
        *,
        tracing: bool = True,
        tracer_provider: TracerProvider | None = None,
        metrics: Sequence[MetricsSink] = (),
    ) -> None:
        tracer = get_tracer(tracer_provider) if tracing else None
        self.spans = RunSpans(tracer) if tracer is not None else None
        """The span hooks when tracing is on (built only while `recording` says so)."""
        self.metrics = fan_out(metrics)
        self._provider = tracer_provider
        self._live: RunSpans | None = None  # `spans`, once its provider was seen recording
        self._steps: dict[str, float] = {}  # run id -> when its open step began

    def recording(self) -> RunSpans | None:
        """The span hooks to call now: `spans` once its provider records spans (checked at each
        start, send and step until it does; OpenTelemetry sets the global provider once and for
        good), else None (no tracing, or no SDK yet: no-op spans are not built)."""
        if self._live is None and self.spans is not None and recording_provider(self._provider):
            self._live = self.spans
        return self._live

    @classmethod
    def off(cls) -> Telemetry:
        """No spans, no metrics (the operator's log lines are still written)."""
        return cls(tracing=False)

    # -- operator events --------------------------------------------------------------------
    def report(self, event: RunEvent) -> None:
        """An operator event: its log line, its counter, a span event on the run's step."""
        events.write(event)
        if self.metrics is not None:
            if event.kind == events.RUN_FAILED:
                self.metrics.add(metrics.RUNS_FINISHED, 1, (event.workflow, "error"))
            elif event.kind == events.RETRY_SCHEDULED:
                self.metrics.add(metrics.RETRIES_SCHEDULED, 1, (event.workflow, event.state))
            else:
                self.metrics.add(_EVENT_COUNTERS[event.kind], 1, (event.workflow,))
        if self._live is not None:
            self._live.annotate(event)

    # -- starts and sends -------------------------------------------------------------------
    @contextmanager
    def starting(
        self,
        workflow: str,
        key: str | None,
        traceparent: str | None = None,
        link: str | None = None,
    ) -> Iterator[Started]:
        """Around starting a run: yields the traceparent to store with it (the start span's;
        with tracing on but no SDK, `traceparent` or the current span's, as the no-op span
        would; `traceparent` itself with tracing off). `link`: a trace this new one comes
        from."""
        if traceparent is not None:
            check_traceparent(traceparent)
        spans = self.recording()
        if spans is not None:
            with spans.start(workflow, key, traceparent, link) as started:
                yield started
        elif traceparent is None or self.spans is None:
            yield Started(self._callers(traceparent))
        else:  # (current inside, as the no-op span in that trace would be)
            with within(traceparent):
                yield Started(traceparent)

    def _callers(self, traceparent: str | None) -> str | None:
        """The traceparent to store where no span is built: the caller's (with tracing on but
        no SDK, the current span's when none is given)."""
        if traceparent is None and self.spans is not None:
            return current_traceparent()
        return traceparent

    def run_started(self, workflow: str) -> None:
        """Count a run that was created."""
        if self.metrics is not None:
            self.metrics.add(metrics.RUNS_STARTED, 1, (workflow,))

    def runs_cancelled(self, workflows: Iterable[str]) -> None:
        """Count runs the store cancelled outside their own step (a cancel with no lease held,
        and the descendants cancelled with a run that was cancelled, stopped them or ended),
        one per workflow name in `workflows`, with the labels a cancelled step gets."""
        if self.metrics is not None:
            for workflow in workflows:
                self.metrics.add(metrics.RUNS_FINISHED, 1, (workflow, "cancelled"))

    @contextmanager
    def sending(
        self, run_id: str, event_type: str, traceparent: str | None = None
    ) -> Iterator[str | None]:
        """Around queueing an event: yields the traceparent to store with it (the send span's,
        or, where none is built, as `starting`)."""
        if traceparent is not None:
            check_traceparent(traceparent)
        spans = self.recording()
        if spans is not None:
            with spans.send(run_id, event_type, traceparent) as stored:
                yield stored
        elif traceparent is None or self.spans is None:
            yield self._callers(traceparent)
        else:
            with within(traceparent):
                yield traceparent

    # -- steps and effects ------------------------------------------------------------------
    def begin_step(
        self,
        run: RunRecord,
        state: str,
        first: bool,
        batch: int,
        attempt: int,
        inbox: Sequence[InboxEvent],
        *,
        began: float | None = None,
    ) -> None:
        """A step of `run` (in `state`) begins: its pending effects are about to execute.
        `first`: the first step since the claim (a takeover shows there); `batch`: how many runs
        the round steps; `inbox`: the queued events it will apply. `began`: when it began
        (`time.perf_counter()`), if before now (a sent event's step, reported once written)."""
        now = time.perf_counter()
        if self.metrics is not None:
            self._steps[run.id] = now if began is None else began
        spans = self.recording()
        if spans is not None:
            start_ns = None if began is None else time.time_ns() - int((now - began) * 1e9)
            spans.begin_step(run, state, first, batch, attempt, inbox, start_ns)

    def effect(
        self, run: RunRecord, kind: str, payload: Any, key: str, beside: bool = False
    ) -> AbstractContextManager[Callable[[str, str | None], None]]:
        """Around executing one effect of `run`'s open step (`beside`: a call that runs beside
        the run, outside its steps: its span is a child of the run's stored trace context);
        the block reports the outcome ("done", "failed", "skipped") and error through the
        yielded function. Without a span (no SDK yet), the run's stored trace context is
        current in the block."""
        if beside:
            self.recording()  # (a call may be the first thing a worker does with an SDK set)
        if (
            self._live is None
            and self.metrics is None
            and (run.traceparent is None or self.spans is None)
        ):
            return UNOBSERVED  # (nothing to record, no context to set: per effect, no frame)
        return self._effect(run, kind, payload, key, beside)

    @contextmanager
    def _effect(
        self, run: RunRecord, kind: str, payload: Any, key: str, beside: bool
    ) -> Iterator[Callable[[str, str | None], None]]:
        spans = self._live
        unrecorded = run.traceparent if spans is None and self.spans is not None else None
        if spans is None and self.metrics is None:
            with within(unrecorded):
                yield _no_outcome
            return
        name = effect_name(kind, payload)
        attempt = payload.get("attempt") if kind == "start_child" else None
        began = time.perf_counter()
        status: list[str] = []

        def outcome(value: str, error: str | None) -> None:
            status.append(value)
            if span_outcome is not None:
                span_outcome(value, error)

        span_outcome: Callable[[str, str | None], None] | None = None
        try:
            if spans is not None:
                with spans.effect(
                    run.id, kind, name, key, attempt, (run.traceparent,) if beside else None
                ) as span_outcome:
                    yield outcome
            else:
                with within(unrecorded):
                    yield outcome
        finally:
            if self.metrics is not None:
                labels = (run.workflow_name, kind, name)
                self.metrics.record(metrics.EFFECT_DURATION, time.perf_counter() - began, labels)
                if not status or status[0] == "failed":  # raised, or reported failed
                    self.metrics.add(metrics.EFFECT_FAILURES, 1, labels)

    def end_step(
        self, run: RunRecord, before: str, commit: StepCommit | None, version: int | None
    ) -> None:
        """`run`'s step ended: committed at `version` (with `commit`), or not (None). `before`
        is the run's status before the step."""
        began = self._steps.pop(run.id, None)
        committed = commit is not None and version is not None
        if self.metrics is not None and committed and commit is not None:
            workflow = run.workflow_name
            self.metrics.add(metrics.STEPS, 1, (workflow,))
            if began is not None:
                self.metrics.record(metrics.STEP_DURATION, time.perf_counter() - began, (workflow,))
            if before == "active" and commit.status not in ("active", "error"):
                self.metrics.add(metrics.RUNS_FINISHED, 1, (workflow, commit.status))
            for new, _ in commit.start_runs:
                self.metrics.add(metrics.RUNS_STARTED, 1, (new.workflow_name,))
        if self._live is not None:
            self._live.end_step(run.id, commit, version)

    def waiting(self, run: RunRecord, reason: str) -> None:
        """`run` was released to wait for a named limit (`reason`: "waiting for capacity: crm",
        "rate limited: crm" or "paused by Retry-After: crm")."""
        if self.metrics is not None:
            why, _, limit = reason.rpartition(": ")
            self.metrics.add(metrics.CAPACITY_WAITS, 1, (run.workflow_name, limit, why))

    def claimed(self, runs: Sequence[RunRecord], now: int) -> None:
        """Runs were claimed at `now`: how late each was (from the time it was due)."""
        if self.metrics is None:
            return
        for run in runs:
            if run.due_at is not None and run.due_at <= now:
                self.metrics.record(
                    metrics.CLAIM_LAG, (now - run.due_at) / 1000, (run.workflow_name,)
                )
