"""The JSON both apps answer about a run: the UI's `/api/runs` and `/api/runs/{run_id}`, the
ingress's starts, events and `GET /api/runs/{run_id}` (`GET /api/workflows/{name}/runs/{key}`).
Pydantic models, so FastAPI puts them into each app's OpenAPI schema, and their conversion
from store records; one model per shape, so the same run reads the same from either app.
Secret-looking keys in contexts and events are hidden here as on the pages.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from persistence.stores import EffectRecord, EventRecord, RunRecord, Store
from persistence.web.runs import redact, run_detail


class RunSummary(BaseModel):
    """One run as listed: where it is and how it is doing (no context)."""

    id: str
    workflow_name: str
    workflow_version: str = Field(description="fingerprint of the definition the run is pinned to")
    key: str | None = Field(description="idempotency key the run was started with")
    state: str = Field(description="active leaf paths, comma separated")
    status: str = Field(description="active, done, done_partial, error or cancelled")
    attempt_count: int
    last_error: str | None
    created_at: int = Field(description="epoch milliseconds")
    updated_at: int = Field(description="epoch milliseconds")
    completed_at: int | None
    wake_at: int | None = Field(description="when a worker next needs to look at the run")
    version: int = Field(description="step number; changes whenever the run moves")
    claim_count: int = Field(0, description="how many times a worker claimed the run")
    problem: str | None = Field(None, description="why the stored row does not parse, if so")
    priority: int = Field(0, description="0-1000, higher claimed first (with aging)")
    waiting_for: str | None = Field(
        None, description="what the run waits for, e.g. 'waiting for capacity: crm' (a named limit)"
    )
    parent_run_id: str | None = Field(None, description="the run that started this child run")
    parent_invoke_id: str | None = Field(
        None, description="this child run's invoke id in its parent (None once stopped)"
    )


class TimerOut(BaseModel):
    """A pending timer."""

    id: str
    event_type: str
    due_at: int
    retry_of: str | None = Field(description="retried state id, for a 'waiting to retry' timer")


class AttemptOut(BaseModel):
    """A retried call: failed tries so far and the last error."""

    state_id: str
    attempt: int
    last_error: str | None


class JournalOut(BaseModel):
    """One journal entry: an applied event and the state before and after it."""

    step: int
    event: dict[str, Any]
    state_before: str
    state_after: str
    created_at: int


class EffectOut(BaseModel):
    """One outbox record (an effect the run asked for)."""

    idempotency_key: str
    kind: str
    status: str
    error: str | None
    updated_at: int


class DeadLetterOut(BaseModel):
    """An event that was queued for the run and can no longer be applied."""

    event: dict[str, Any]
    created_at: int
    dead_at: int
    reason: str


class RunDetailOut(RunSummary):
    """One run with its context, timers, retries, recent effects and journal (newest first)."""

    context: Any
    timers: list[TimerOut]
    attempts: list[AttemptOut]
    queued_events: list[dict[str, Any]] = Field(description="sent, not yet applied by a worker")
    dead_letters: list[DeadLetterOut] = Field(
        default_factory=list, description="sent, never applied: the run had ended"
    )
    effects: list[EffectOut]
    journal: list[JournalOut]
    journal_total: int
    error_traceback: str | None = Field(
        None,
        description="where the code that failed the run raised (an action, an assign, a "
        "guard; or the call whose error no state handled)",
    )
    children: list[RunSummary] = Field(
        default_factory=list, description="the child runs it started, newest first"
    )


def summary(run: RunRecord) -> RunSummary:
    """The listed fields of a run."""
    return RunSummary(
        id=run.id,
        workflow_name=run.workflow_name,
        workflow_version=run.workflow_version,
        key=run.key,
        state=run.state,
        status=run.status,
        attempt_count=run.attempt_count,
        last_error=run.last_error,
        created_at=run.created_at,
        updated_at=run.updated_at,
        completed_at=run.completed_at,
        wake_at=run.wake_at,
        version=run.version,
        claim_count=run.claim_count,
        problem=run.problem,
        priority=run.priority,
        waiting_for=run.waiting_for,
        parent_run_id=run.parent_run_id,
        parent_invoke_id=run.parent_invoke_id,
    )


def _journal(entry: EventRecord) -> JournalOut:
    return JournalOut(
        step=entry.step,
        event=redact(entry.event),
        state_before=entry.state_before,
        state_after=entry.state_after,
        created_at=entry.created_at,
    )


def _effect(effect: EffectRecord) -> EffectOut:
    return EffectOut(
        idempotency_key=effect.idempotency_key,
        kind=effect.kind,
        status=effect.status,
        error=effect.error,
        updated_at=effect.updated_at,
    )


def run_out(store: Store, run_id: str) -> RunDetailOut:
    """The run with this id as both apps answer `GET /api/runs/{run_id}`: its details
    (`persistence.web.runs.run_detail`) as JSON (`RunNotFoundError` for an unknown id)."""
    detail = run_detail(store, run_id)
    return RunDetailOut(
        **summary(detail.run).model_dump(),
        context=redact(detail.context),
        timers=[
            TimerOut(id=t.id, event_type=t.event_type, due_at=t.due_at, retry_of=t.retry_of)
            for t in detail.timers
        ],
        attempts=[
            AttemptOut(state_id=a.state_id, attempt=a.attempt, last_error=a.last_error)
            for a in detail.attempts
        ],
        queued_events=[redact(e.event) for e in detail.inbox],
        dead_letters=[
            DeadLetterOut(
                event=redact(d.event), created_at=d.created_at, dead_at=d.dead_at, reason=d.reason
            )
            for d in detail.dead_letters
        ],
        effects=[_effect(e) for e in detail.effects],
        journal=[_journal(e) for e in detail.journal],
        children=[summary(c) for c in detail.children],
        journal_total=detail.journal_total,
        error_traceback=None if detail.traceback is None else detail.traceback.text,
    )
