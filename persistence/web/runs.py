"""A run as the web shows it, assembled from the store: its error, pending timers, retried
calls, recent journal, effects and calls, queued and dead events, parent and child runs, and
the traceback beside a failure; and the hiding of secret-looking keys wherever a value leaves
for a page or the JSON. Plain data, no HTTP: the UI's run page, both apps' `GET
/api/runs/{run_id}` (`persistence.web.responses`) and `statecharts runs show` read it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from persistence.runtime import error_run_key
from persistence.stores import (
    TERMINAL_STATUSES,
    CallAttempt,
    CallRecord,
    DeadLetter,
    EffectRecord,
    EventRecord,
    InboxEvent,
    RunQuery,
    RunRecord,
    Store,
)
from statecharts.events import error_actor_event_type
from statecharts.retrying import retried_state_of_timer

TIMELINE_LIMIT = 500
"""At most this many journal entries in a run's details (the newest ones)."""

_SECRET_KEY = re.compile(
    r"pass(word|wd|phrase)?|secret|token|api[_-]?key|authorization|credential|private[_-]?key"
    r"|cookie|session",
    re.IGNORECASE,
)
HIDDEN = "[hidden]"


def run_error(run: RunRecord) -> str | None:
    """The run's last error, or the error its snapshot ended with."""
    return run.last_error or run.problem or error_text(run.snapshot.get("error"))


@dataclass(frozen=True)
class TimerView:
    """A pending timer: what it sends, when, and whether it is a retry wait."""

    id: str
    event_type: str
    due_at: int
    retry_of: str | None  # the retried state's id for a "waiting to retry" timer
    event: dict[str, Any]


@dataclass(frozen=True)
class AttemptView:
    """A retried call of the run: how many tries failed and the last error."""

    state_id: str
    attempt: int
    last_error: str | None
    started_at: int | None


@dataclass(frozen=True)
class RunDetail:
    """Everything the run page shows (the JSON of a run: `persistence.web.responses`)."""

    run: RunRecord
    context: Any
    error: str | None  # the run's last error, or the error its snapshot ended with
    timers: list[TimerView]
    attempts: list[AttemptView]
    journal: list[EventRecord]
    journal_total: int
    effects: list[EffectRecord]
    inbox: list[InboxEvent]
    calls: list[CallView] = field(default_factory=list)
    """The run's calls (beside it), newest first, each with every attempt."""
    dead_letters: list[DeadLetter] = field(default_factory=list)
    parent: RunRecord | None = None
    """The run that started this one (a child run), if any."""
    children: list[RunRecord] = field(default_factory=list)
    """The child runs this run started, newest first."""
    error_run: RunRecord | None = None
    """The error-workflow run started when this run failed, if any."""
    traceback: FailureTraceback | None = None
    """Where the code that failed the run raised (`failure_traceback`), if it did."""
    search: dict[str, str] = field(default_factory=dict)
    """Its search attributes (each links to the runs list filtered by it)."""

    @property
    def active(self) -> bool:
        """True while the run can still take events."""
        return self.run.status not in TERMINAL_STATUSES


def run_detail(store: Store, run_id: str) -> RunDetail:
    """The run's details (`RunNotFoundError` for an unknown id)."""
    run = store.get_run(run_id)
    snapshot = run.snapshot
    calls = calls_of(store, run_id)
    return RunDetail(
        run=run,
        context=snapshot.get("context"),
        error=run_error(run),
        timers=timers_of(snapshot),
        attempts=attempts_of(snapshot),
        journal=store.list_events(run_id, last=TIMELINE_LIMIT)[::-1],
        journal_total=store.count_events(run_id),
        effects=store.list_effects(run_id, last=50)[::-1],
        calls=calls,
        inbox=store.pending_events(run_id),
        dead_letters=store.dead_letters(run_id),
        parent=None if run.parent_run_id is None else store.get_run(run.parent_run_id),
        children=store.search_runs(RunQuery(parent_run_id=run.id), limit=CHILDREN_LIMIT),
        error_run=_error_run(store, run),
        traceback=failure_traceback(store, run, calls),
        search=store.search_attributes(run_id),
    )


@dataclass(frozen=True)
class FailureTraceback:
    """Where the code that failed a run raised, and whose code it was: the run's own (None)
    or a call's, e.g. "call 'charge', attempt 3"."""

    text: str
    of: str | None = None


def failure_traceback(
    store: Store, run: RunRecord, calls: Sequence[CallView]
) -> FailureTraceback | None:
    """The traceback beside the run's error: the one recorded with it (an action, an assign
    or a guard raised: `Store.error_traceback`), else, for a run failed by a call's error that
    no state handled, the last attempt's of that call (the step that failed the run applied
    its `xstate.error.actor.<id>`). None if the error raised nothing of the machine's."""
    if not run.last_error:
        return None
    own = store.error_traceback(run.id)
    if own is not None or run.status != "error":
        return None if own is None else FailureTraceback(own)
    last = store.list_events(run.id, last=1)
    failed_by = str(last[0].event.get("type")) if last else None
    for view in calls:
        if (
            error_actor_event_type(view.call.call_id) == failed_by
            and view.call.status == "failed"
            and view.attempts
            and view.attempts[-1].traceback
        ):
            attempt = view.attempts[-1]
            return FailureTraceback(
                str(attempt.traceback), f"call {view.call.call_id!r}, attempt {attempt.attempt}"
            )
    return None


@dataclass(frozen=True)
class CallView:
    """One call of a run with its attempts, as the run page shows it."""

    call: CallRecord
    attempts: list[CallAttempt]


def calls_of(store: Store, run_id: str, limit: int = 50) -> list[CallView]:
    """The run's last `limit` calls, newest first, each with its attempts (oldest first): an
    on-call engineer sees every attempt, with its worker, outcome and error."""
    attempts: dict[str, list[CallAttempt]] = {}
    for attempt in store.call_attempts(run_id):
        attempts.setdefault(attempt.idempotency_key, []).append(attempt)
    calls = store.list_calls(run_id)[-limit:]
    return [CallView(c, attempts.get(c.idempotency_key, [])) for c in reversed(calls)]


def _error_run(store: Store, run: RunRecord) -> RunRecord | None:
    """The error-workflow run `run`'s failure started (found by its key), if any."""
    if run.status != "error":
        return None
    found = store.search_runs(RunQuery(key=error_run_key(run.id)), limit=1)
    return found[0] if found else None


CHILDREN_LIMIT = 200
"""How many child runs a run's details list."""


def timers_of(snapshot: Mapping[str, Any]) -> list[TimerView]:
    """The snapshot's pending timers, soonest first."""
    found = []
    for timer in snapshot.get("timers") or ():
        event = timer.get("event") or {}
        event_type = str(event.get("type", ""))
        found.append(
            TimerView(
                str(timer.get("id")),
                event_type,
                int(timer.get("due_at", 0)),
                retried_state_of_timer(event_type),
                dict(event),
            )
        )
    return sorted(found, key=lambda t: (t.due_at, t.id))


def attempts_of(snapshot: Mapping[str, Any]) -> list[AttemptView]:
    """The run's retried calls (from the snapshot's retry records)."""
    found = []
    for state_id, record in sorted((snapshot.get("retries") or {}).items()):
        error = record.get("last_error")
        found.append(
            AttemptView(
                state_id, int(record.get("attempt", 0)), error_text(error), record.get("started_at")
            )
        )
    return found


def error_text(error: Any) -> str | None:
    """A one-line description of a stored error (`{"name", "message"}` or any JSON)."""
    if error is None:
        return None
    if isinstance(error, Mapping):
        name, message = error.get("name"), error.get("message")
        if name or message:
            return ": ".join(str(p) for p in (name, message) if p)
    return json_text(error, indent=False)


def redact(value: Any) -> Any:
    """`value` with the values of secret-looking keys (password, token, api_key, ...) hidden,
    so they never reach a page or the API."""
    if isinstance(value, Mapping):
        return {k: HIDDEN if _SECRET_KEY.search(str(k)) else redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


def json_text(value: Any, indent: bool = True) -> str:
    """Readable JSON of `value` with secrets hidden (escaped later by the templates)."""
    option = orjson.OPT_SORT_KEYS | (orjson.OPT_INDENT_2 if indent else 0)
    return orjson.dumps(redact(value), option=option, default=str).decode()
