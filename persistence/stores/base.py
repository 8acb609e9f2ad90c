"""The store contract: record types, errors and the `Store` protocol every backend implements.

A store keeps one row per workflow run plus its outbox (`workflow_effects`), its inbox of events
sent from outside (`workflow_inbox`), an optional journal (`workflow_events`) and small shared
tables used by helpers (circuit breakers, "one run at a time" claims, schedules).

Times are integers: milliseconds since the Unix epoch, as the engine uses. Callers pass `now`
explicitly so a simulated clock drives timers and leases in tests exactly as in production; in
production it is the store's own clock (`Store.clock()`: the database server's time on
PostgreSQL, a monotonic machine clock on SQLite), so that no worker's wall clock decides when a
lease ends.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from persistence.stores.clocks import StoreClock
from persistence.wakeup import Wakeup
from statecharts.events import done_actor_event_type, error_actor_event_type
from statecharts.idempotency import KEY_LENGTH
from statecharts.idempotency import idempotency_key as provider_key

JSONDict = dict[str, Any]

ACTIVE = "active"
"""The only non-terminal run status; every other status ends the run."""

TERMINAL_STATUSES = frozenset({"done", "done_partial", "error", "cancelled"})
"""Statuses a run can end in. `error` also sets `failed_at`; all of them set `completed_at`."""

RUN_STATUSES = frozenset({ACTIVE}) | TERMINAL_STATUSES

EFFECT_STATUSES = frozenset({"pending", "done", "skipped", "failed"})

MAX_STORED_KEY_BYTES = 1000
"""The longest run key any store holds, in UTF-8 bytes (Temporal's workflow id limit), the
same on SQLite and PostgreSQL and well inside PostgreSQL's 2,704-byte btree index row. Every
run inserted is held to it (`NewRun` raises `StoreEncodingError`): a start's key, and a child
run's derived key (`<parent key>/<invoke id>`), whose refusal fails the parent's step."""


def stored_key_problem(key: str) -> str | None:
    """Why `key` is too long to be a run's key, or None."""
    size = len(key.encode("utf-8", "surrogatepass"))
    if size <= MAX_STORED_KEY_BYTES:
        return None
    return (f"{key[:40]!r}... is {size} bytes in UTF-8; a run's key is at most "
            f"{MAX_STORED_KEY_BYTES}")


SEALED = "$enc"
"""The key-id field of an encrypted payload's envelope (`persistence.stores.codec`): a JSON
object with it and `ct` is a sealed payload."""


class StoreError(Exception):
    """Base class of every error raised by a store."""


class ConflictError(StoreError):
    """A write lost a race: the run's version or lease owner is not what the writer expected.

    The writer's view is stale; nothing was written. Reload the run and decide again.
    """


class RunNotFoundError(StoreError, LookupError):
    """No run has the given id."""


class RunFinishedError(StoreError):
    """The run is terminal and cannot accept the requested change (for example a new event)."""


class SchemaVersionError(StoreError):
    """The database schema is older or newer than the code expects."""


class StoreUnavailableError(StoreError):
    """The database cannot be reached right now (connection lost, server down, file locked).

    Workers treat this as transient: back off, reconnect, try again. Nothing was committed by the
    call that raised it unless the store says otherwise.
    """


class StoreEncodingError(StoreError):
    """A value the database cannot hold (an integer too large, a NUL in a string, invalid
    Unicode): a fault of the data, never an outage. The run it belongs to is failed."""


class StoreURLError(StoreError, ValueError):
    """A store URL that `open_store` cannot understand."""


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One row of `workflow_runs` as read from the store."""

    id: str
    workflow_name: str
    workflow_version: str
    key: str | None
    state: str
    snapshot: JSONDict
    status: str
    attempt_count: int
    created_at: int
    updated_at: int
    completed_at: int | None
    failed_at: int | None
    last_error: str | None
    wake_at: int | None
    lease_owner: str | None
    lease_expires_at: int | None
    version: int
    claim_count: int = 0
    """How many times a worker claimed the run."""
    traceparent: str | None = None
    """The W3C traceparent of the run's start span: its steps' spans are its children."""
    parent_run_id: str | None = None
    """The run that started this one as a child (its invoke or `spawn_child`), else None."""
    parent_invoke_id: str | None = None
    """This run's child id in its parent (the invoke id); None once the parent stopped it."""
    priority: int = 0
    """Claims take higher priorities first, with aging (`CLAIM_ORDER`)."""
    waiting_for: str | None = None
    """Why the active run is not moving, e.g. "waiting for capacity: crm" (a named limit)."""
    problem: str | None = None
    """Why the row does not parse (its snapshot or a column), when it does not: such a row is
    listed with this text and failed at its next claim, never stepped."""
    previous_owner: str | None = field(default=None, compare=False)
    """On a claimed run: the lease owner it was taken over from (its lease had expired)."""
    due_at: int | None = field(default=None, compare=False)
    """On a claimed run: when it was due (its `wake_at` before the claim), for the claim lag."""

    @property
    def terminal(self) -> bool:
        """True when the run has ended (any status but `active`)."""
        return self.status != ACTIVE


@dataclass(frozen=True, slots=True)
class Delivery:
    """An event a step sends to a related run, queued in that run's inbox in the step's
    transaction: to `child`, the committing run's active child run of that invoke id or
    else the active child run registered as that systemId anywhere in its run tree (the
    root run and all its descendants), or to the run `parent` (the committing run's
    parent). With `completes`, the event reports the committing run's end to its parent and
    is dropped if the parent has stopped it. An event for no such active run is a dead letter
    of the sender; one for a parent that has ended, a dead letter of the parent."""

    event: JSONDict
    child: str | None = None
    parent: str | None = None
    completes: bool = False


@dataclass(frozen=True, slots=True)
class NewRun:
    """What the runtime hands the store to create a run (the initial step already applied)."""

    id: str
    workflow_name: str
    workflow_version: str
    key: str | None
    state: str
    snapshot: JSONDict
    status: str = ACTIVE
    wake_at: int | None = None
    attempt_count: int = 0
    last_error: str | None = None
    traceparent: str | None = None
    lease_owner: str | None = None
    """Inserted already leased to this owner (until `wake_at`, which is then the lease's
    expiry): the starter drives the run itself, with no claim (`persistence.inline`)."""
    parent_run_id: str | None = None
    parent_invoke_id: str | None = None
    deliveries: tuple[Delivery, ...] = ()
    """Events its first step sends (to the children started with it, or its parent), queued
    once every run created with it exists."""
    priority: int = 0
    system_id: str | None = None
    """A child run's `systemId` (its key), registered in its whole run tree: refused with
    `SystemIdTakenError` when an active child run of the tree already holds it."""
    call_lease: tuple[str, int] | None = None
    """(owner, until): its first step's calls leased to that call executor (`StepCommit`)."""
    limit_share: str | None = None
    """The limit (a per-key limit's share, `<limit>[<key>]`) its workflow's steps take a place
    of: while it waits to be claimed, a refusal of that limit queues it with the others
    (`Capacity`: its backlog parked), so its backlog never stands in the claim order."""
    search: tuple[tuple[str, str], ...] = ()
    """Its search attributes, (name, value) pairs (`persistence.search`), inserted with it."""

    def __post_init__(self) -> None:
        # Every run a store inserts passes here: starts, child runs (whose keys are derived),
        # error-workflow and scheduled runs, so both stores refuse the same keys.
        problem = None if self.key is None else stored_key_problem(self.key)
        if problem is not None:
            whose = "run key" if self.parent_invoke_id is None else (
                f"key of the child run invoked as {self.parent_invoke_id!r} (the parent's key, "
                "'/', the invoke id)")
            raise StoreEncodingError(f"the {whose} {problem}")


@dataclass(frozen=True, slots=True)
class NewEffect:
    """An effect to record in the outbox, in execution order within its step."""

    index: int
    kind: str
    payload: JSONDict


@dataclass(frozen=True, slots=True)
class EffectRecord:
    """One row of `workflow_effects` (the outbox)."""

    idempotency_key: str
    run_id: str
    step: int
    effect_index: int
    kind: str
    payload: JSONDict
    status: str
    result: Any
    error: str | None
    created_at: int
    updated_at: int


@dataclass(frozen=True, slots=True)
class EffectOutcome:
    """How an executed effect ended; recorded in the same transaction as the step it fed."""

    idempotency_key: str
    status: str
    result: Any = None
    error: str | None = None

    def __post_init__(self) -> None:
        if self.status not in EFFECT_STATUSES - {"pending"}:
            raise ValueError(f"effect outcome status must be done/skipped/failed: {self.status!r}")


@dataclass(frozen=True, slots=True)
class InboxEvent:
    """An event sent to a run from outside, waiting for a worker to apply it."""

    id: int
    run_id: str
    event: JSONDict
    created_at: int
    traceparent: str | None = None
    """The traceparent of the `send` that queued it (the applying step links to it)."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """An event that was queued for a run and can no longer be applied, with the reason."""

    id: int
    run_id: str
    event: JSONDict
    created_at: int
    dead_at: int
    reason: str


@dataclass(frozen=True, slots=True)
class PendingWork:
    """What a claimed run has waiting: outbox rows not yet done and queued inbox events."""

    effects: list[EffectRecord]
    inbox: list[InboxEvent]
    problem: str | None = None
    """Why some of it cannot be read (an encrypted payload whose key is missing): the run is
    then failed with this text, never stepped without it."""


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """An entry to append to the run's journal: the event and the state before and after."""

    event: JSONDict
    state_before: str
    state_after: str
    inbox_id: int | None = None
    """The inbox row whose event this is (None: a timer, an effect's result, the store's)."""


@dataclass(frozen=True, slots=True)
class EventProgress:
    """Where an event sent to a run stands (`RunQueries.event_progress`): `queued` (not
    applied yet), `applied` (by step `step`, leaving the run in `state`; both None when the
    step journaled nothing: a runtime with `journal=False`), or `dead` (never to be applied,
    for `reason`)."""

    status: str
    step: int | None = None
    state: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One row of `workflow_events` (append-only journal)."""

    id: int
    run_id: str
    step: int
    event: JSONDict
    state_before: str
    state_after: str
    created_at: int


CALL = "call"
"""The outbox kind of an invoked function or coroutine that runs beside its run (a row of
`workflow_calls`, not of `workflow_effects`)."""

TRANSIENT_PREFIX = "transient failure"
"""How `last_error` starts while a run waits out the backoff of a transient failure."""

STOPPED_BY_EXIT = "stopped: its invoking state was left"
STOPPED_BY_END = "stopped: its run ended"


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One row of `workflow_calls`."""

    idempotency_key: str
    run_id: str
    step: int
    call_id: str
    payload: dict[str, Any]
    status: str
    attempt: int
    owner: str | None
    lease_expires_at: int | None
    available_at: int
    details: Any
    error: str | None
    created_at: int
    updated_at: int
    problem: str | None = None
    """Why its payload cannot be read (encrypted with a key that is missing): the call is
    then ended as failed with this text, never run without its input."""


@dataclass(frozen=True, slots=True)
class CallAttempt:
    """One attempt of a call (a row of `workflow_call_attempts`); `outcome` is None while it
    runs, else `done`, `failed`, `timed_out`, `retrying` (a transient failure), `stopped`,
    `lost` (its worker stopped answering) or `skipped` (an external call in a dry run: its
    call is `done`, with the output and the attempt's message `dry-run`)."""

    idempotency_key: str
    attempt: int
    run_id: str
    worker: str
    started_at: int
    ended_at: int | None
    outcome: str | None
    error_name: str | None = None
    message: str | None = None
    traceback: str | None = None


@dataclass(frozen=True, slots=True)
class CallFinish:
    """A call's end as the send of its result records it (`RunStore.send_and_step`)."""

    key: str
    owner: str
    attempt: int
    status: str
    """`done` or `failed`."""
    end: CallEnd


@dataclass(frozen=True, slots=True)
class CallEnd:
    """How an attempt ended, as `finish_call` and `retry_call` record it."""

    outcome: str
    error_name: str | None = None
    message: str | None = None
    traceback: str | None = None


def is_call(effect: NewEffect) -> bool:
    """Whether a recorded effect is a call beside its run."""
    return effect.kind == CALL


def leasable_calls(effects: Sequence[NewEffect]) -> int:
    """How many of a step's calls may be leased to an executor in the step's own commit: all
    of them, unless the step also records effects its run executes itself, which run first
    (its calls are then claimed once those are done: `Calls.claim_calls`)."""
    count = sum(1 for e in effects if is_call(e))
    return count if count == len(effects) else 0


def unowned_calls(effects: Sequence[NewEffect], lease: tuple[str, int] | None) -> bool:
    """Whether a step records calls no executor holds yet (any worker's may claim them: wake
    the workers)."""
    return lease is None and any(is_call(e) for e in effects)


@dataclass(frozen=True, slots=True)
class StepCommit:
    """Everything one step of a run writes, committed in one transaction.

    The write succeeds only while `owner` holds the run's lease and the run is still at
    `expected_version`; otherwise `ConflictError` and nothing is written. The new version is
    `expected_version + 1` and is the step number of `new_effects`.

    With `release=True` the lease is given up and `wake_at` becomes the run's next due time;
    otherwise the lease is kept (renewed to `lease_until` when given) and `wake_at` stays at the
    lease expiry, so a crash hands the run to another worker once the lease runs out.
    `attempt_count`, `last_error` and `workflow_version` (set when a migration moved the run to
    a new definition) are left as they are when None. `start_runs` are created (idempotent by
    key, as `create_run`) in the same transaction, e.g. an error workflow started exactly once
    for the failure this step records, or the child runs its invokes start (after the
    children it stops: `stop_children`, invoke ids whose active child runs are cancelled,
    recursively). `deliveries` are queued after that.
    """

    run_id: str
    owner: str
    expected_version: int
    state: str
    snapshot: JSONDict
    status: str
    wake_at: int | None = None
    release: bool = True
    attempt_count: int | None = None
    last_error: str | None = None
    workflow_version: str | None = None
    lease_until: int | None = None
    new_effects: Sequence[NewEffect] = ()
    effect_outcomes: Sequence[EffectOutcome] = ()
    consumed_inbox: Sequence[int] = ()
    journal: Sequence[JournalEntry] = ()
    start_runs: Sequence[tuple[NewRun, Sequence[NewEffect]]] = ()
    stop_children: Sequence[str] = ()
    deliveries: Sequence[Delivery] = ()
    stop_calls: Sequence[str] = ()
    """Invoke ids whose calls recorded by earlier steps this step stops (it left their
    invoking states, or ended the run): their results will be dropped."""
    call_lease: tuple[str, int] | None = None
    """(owner, until): the calls this step records are leased to that call executor, their
    first attempts opened, in the step's transaction (no claim: it runs them next)."""
    error_traceback: str | None = None
    """Where the code that failed the run raised (`status` error), shown beside its
    `last_error`; None keeps the row's value."""
    search: Mapping[str, str | None] = field(default_factory=dict)
    """The search attributes this step changed: name -> new value (None: no longer set).
    Empty (nothing written) when the step changed none (`persistence.search`)."""
    unleased: bool = False
    """The step was computed from a read without a lease (`RunStore.read_work`): it is written
    only while no worker holds the run (and it is still at `expected_version`), instead of
    under `owner`'s lease. Keeping the run (`release=False`, its new effects run next) takes
    the lease for `owner` in the same write: a claim folded into the commit, counted in
    `claim_count`."""


@dataclass(frozen=True, slots=True)
class VersionCount:
    """Active runs of one workflow version that the asking worker cannot step."""

    workflow_name: str
    workflow_version: str
    runs: int
    label: str | None = None
    """The `version` label inside the runs' snapshots (what a migration is keyed by)."""


@dataclass(frozen=True, slots=True)
class BreakerRecord:
    """Shared circuit-breaker state for one downstream name (semantics belong to the caller)."""

    name: str
    state: str
    failure_count: int = 0
    opened_at: int | None = None
    data: JSONDict = field(default_factory=dict)
    updated_at: int = 0
    version: int = 0


@dataclass(frozen=True, slots=True)
class ClaimRecord:
    """A "one run at a time" claim: who holds `name`, since when, until when it is stale."""

    name: str
    owner: str
    run_id: str | None
    claimed_at: int
    expires_at: int


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """A scheduled start's state, advanced atomically with the run it starts: every slot up to
    `last_fire_at` is decided (fired, buffered or skipped)."""

    name: str
    last_fire_at: int | None
    version: int
    last_run_id: str | None = None
    """The run the schedule started last: the one a new slot overlaps while it is active."""
    buffered_at: int | None = None
    """The slot an overlap policy `buffer_one` holds until `last_run_id` ends."""
    skipped_count: int = 0
    """How many slots were skipped in all."""
    skipped: tuple[Mapping[str, Any], ...] = ()
    """The latest skips, oldest first (at most `MAX_SKIP_RECORDS`): `first` and `last` slot
    (epoch ms), `count`, `reason`, `at` (when it was decided)."""


MAX_SKIP_RECORDS = 20
"""How many skip records a schedule keeps (the count of all skips is kept too)."""


@dataclass(frozen=True, slots=True)
class Grant:
    """A store's answer to a call asking for a named limit's capacity (`Capacity`)."""

    granted: bool
    retry_at: int | None = None
    """Not granted: when the run looks again (a freed slot wakes a queued run sooner)."""
    reason: str | None = None
    """Not granted: what the run waits for, as shown on its row ("waiting for capacity: crm")."""


@dataclass(frozen=True, slots=True)
class Handover:
    """A run a released slot went to, leased to the releasing worker (`Capacity.release_capacity`
    with an owner): `holder` (the run's place in the limit) now holds the slot, and `work` is
    the run's pending work, so the worker steps it at once, with no claim and no wake-up."""

    holder: str
    run: RunRecord
    work: PendingWork


@dataclass(frozen=True, slots=True)
class LimitUsage:
    """One named limit now: calls in flight, runs waiting for it (by reason), its pause."""

    name: str
    in_flight: int = 0
    waiting: Mapping[str, int] = field(default_factory=dict)
    paused_until: int | None = None


GROUP_COLUMNS = frozenset({"workflow_name", "workflow_version", "state"})
"""Columns `Store.run_groups` may group runs by."""


@dataclass(frozen=True, slots=True)
class RunQuery:
    """Filters for the operator's runs list (`search_runs`, `count_matching`); all optional,
    combined with AND.

    `state` is a state path relative to the root (as in the `state` column): a run matches when
    one of its active leaves is that state or inside it. `created_after`/`created_before` bound
    the start time. `id_prefix` keeps runs whose id starts with it (the CLI's short ids).
    `parent_run_id` keeps the child runs of that run.
    `stuck_before` keeps only stuck runs: active, not updated since that time,
    and not waiting for anything due later than it (a run whose timer or lease runs into the
    future is waiting, not stuck; one whose wake-up time passed long ago has no worker).
    """

    workflow_name: str | None = None
    status: str | None = None
    state: str | None = None
    key: str | None = None
    created_after: int | None = None
    created_before: int | None = None
    stuck_before: int | None = None
    id_prefix: str | None = None
    parent_run_id: str | None = None
    search: tuple[tuple[str, str], ...] = ()
    """Search attributes (name, value as text) the run must have, every one of them."""

    def matches(self, run: RunRecord) -> bool:
        """True when `run` passes every filter but `search` (a search attribute is not on the
        row: the SQL stores compute it in the database)."""
        return (
            (self.workflow_name is None or run.workflow_name == self.workflow_name)
            and (self.status is None or run.status == self.status)
            and (self.key is None or run.key == self.key)
            and (self.created_after is None or run.created_at >= self.created_after)
            and (self.created_before is None or run.created_at < self.created_before)
            and (
                self.stuck_before is None
                or (
                    run.status == ACTIVE
                    and run.updated_at < self.stuck_before
                    and (run.wake_at is None or run.wake_at < self.stuck_before)
                )
            )
            and (self.state is None or in_state(run.state, self.state))
            and (self.id_prefix is None or run.id.startswith(self.id_prefix))
            and (self.parent_run_id is None or run.parent_run_id == self.parent_run_id)
        )


def known_status(query: RunQuery) -> str | None:
    """The one status every run matching `query` has, if the query fixes it (then a count
    needs no grouping, and can be answered from a partial index)."""
    if query.stuck_before is not None:
        return ACTIVE if query.status in (None, ACTIVE) else query.status
    return query.status


def in_state(state_column: str, path: str) -> bool:
    """True when one of the comma-separated active leaves is `path` or inside it."""
    return any(leaf == path or leaf.startswith(path + ".") for leaf in state_column.split(","))


def run_query_sql(
    query: RunQuery, mark: str, time_param: Callable[[int], Any]
) -> tuple[str, list[Any]]:
    """The WHERE clause (or "") and its parameters for `query`, for SQL stores whose parameter
    marker is `mark` ("?" or "%s"); `time_param` converts epoch ms to the column's type."""
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (
        ("workflow_name", query.workflow_name),
        ("status", query.status),
        ("key", query.key),
        ("parent_run_id", query.parent_run_id),
    ):
        if value is not None:
            clauses.append(f"{column} = {mark}")
            params.append(value)
    if query.created_after is not None:
        clauses.append(f"created_at >= {mark}")
        params.append(time_param(query.created_after))
    if query.created_before is not None:
        clauses.append(f"created_at < {mark}")
        params.append(time_param(query.created_before))
    if query.stuck_before is not None:
        # updated_minute (the indexed minute of updated_at, schema 6) bounds the index range
        clauses.append(
            f"status = 'active' AND updated_minute < {mark} AND updated_at < {mark} "
            f"AND (wake_at IS NULL OR wake_at < {mark})"
        )
        params += [time_param(query.stuck_before)] * 3
    if query.state is not None:
        # The column holds leaves joined by commas: match a whole leaf or a leaf below `state`.
        pattern = _like_escaped(query.state)
        # `state >= ''` is always true; it lets the planner answer from an index on the state.
        clauses.append(
            f"state >= '' AND ((',' || state || ',') LIKE {mark} ESCAPE '\\' "
            f"OR (',' || state) LIKE {mark} ESCAPE '\\')"
        )
        params += [f"%,{pattern},%", f"%,{pattern}.%"]
    if query.id_prefix is not None:
        clauses.append(f"CAST(id AS TEXT) LIKE {mark} ESCAPE '\\'")  # PostgreSQL: a uuid
        params.append(_like_escaped(query.id_prefix) + "%")
    for name, value in query.search:  # (each answered from workflow_search_value, index-only)
        clauses.append(f"id IN (SELECT run_id FROM workflow_search WHERE name = {mark} AND "
                       f"value = {mark})")  # fmt: skip
        params += [name, value]
    return ("WHERE " + " AND ".join(clauses) if clauses else ""), params


def _like_escaped(text: str) -> str:
    """`text` as a LIKE pattern matching only itself (escape character backslash)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


CLAIMABLE = "wake_at <= {now} AND {free}"
"""Which runs a claim takes, once for every store (`{now}`/`{free}` filled in): due ones. A run
has a wake-up time only while it is active or has outbox effects left to run, so terminal runs
are never claimed for their queued events; queued events make only *active* runs claimable."""

PRIORITY_AGING_MS = 60_000
"""The aging rule of priorities: a run of priority p is claimed as if it had been due p times
this much earlier, so a priority-0 run due for 5 minutes goes before a priority-4 run due now,
and a long-due run is never starved by a stream of higher priorities."""

MAX_PRIORITY = 1000
"""Priorities are integers 0 (the default) to this; higher is claimed first."""

CLAIMABLE_BY_EVENT = "status = 'active' AND {free}"
"""Runs a queued (live) inbox event makes claimable: active ones only."""


def ended_reason(status: str) -> str:
    """The dead-letter reason of an event left queued when its run ended in `status`."""
    return f"the run ended ({status}) before this event was applied"


def broken_reason(problems: Sequence[str]) -> str:
    """The `last_error` of a row that does not parse."""
    return "row does not parse: " + "; ".join(problems)


_RUN_FIELDS: tuple[tuple[str, Any], ...] = (
    ("id", str), ("workflow_name", str), ("workflow_version", str), ("key", (str, type(None))),
    ("state", str), ("snapshot", dict), ("status", str), ("attempt_count", int),
    ("created_at", int), ("updated_at", int), ("completed_at", (int, type(None))),
    ("failed_at", (int, type(None))), ("last_error", (str, type(None))),
    ("wake_at", (int, type(None))), ("lease_owner", (str, type(None))),
    ("lease_expires_at", (int, type(None))), ("version", int), ("claim_count", int),
    ("traceparent", (str, type(None))), ("parent_run_id", (str, type(None))),
    ("parent_invoke_id", (str, type(None))), ("priority", int),
    ("waiting_for", (str, type(None))),
)
_EMPTY_OF: dict[Any, Any] = {str: "", int: 0, dict: {}}


def parse_run(values: list[Any], loads: Callable[[Any], Any] | None = None,
              previous_owner: str | None = None, due_at: int | None = None,
              opens: Callable[[Any, str], Any] | None = None) -> RunRecord:  # fmt: skip
    """A `RunRecord` from a row's values in `RunRecord` field order (the snapshot as text when
    `loads` is given; a sealed snapshot opened by `opens`, given it and the run id). A row
    that does not parse (or whose snapshot does not open: a missing key) is never an
    exception: the record carries the `problem` (and harmless empty values), so listings
    show it and claims fail it."""
    problems: list[str] = []
    if loads is not None and isinstance(values[5], str | bytes):
        try:
            values[5] = loads(values[5])
        except ValueError as exc:
            problems.append(f"snapshot is not JSON ({exc})")
            values[5] = {}
    if opens is not None and type(values[5]) is dict and SEALED in values[5]:
        try:
            values[5] = opens(values[5], str(values[0]))
        except StoreError as exc:  # the codec's PayloadKeyError, PayloadTamperedError
            problems.append(str(exc))
            values[5] = {}
    for i, (name, kind) in enumerate(_RUN_FIELDS):
        value = values[i]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            problems.append(f"{name} holds {type(value).__name__} {value!r:.40}")
            values[i] = None if isinstance(kind, tuple) else _EMPTY_OF[kind]
    if problems:
        return RunRecord(*values, problem=broken_reason(problems),  # type: ignore[misc]
                         previous_owner=previous_owner, due_at=due_at)
    return RunRecord(*values, previous_owner=previous_owner, due_at=due_at)  # type: ignore[misc]


FAILED_EVENT = "statecharts.failed"
"""Journal record of a run failed by the worker outside the engine (`Store.fail_run`)."""
RESUME_EVENT = "statecharts.resume"
"""Journal record of an operator's resume (`Store.resume_run`)."""

CANCEL_EVENT = "statecharts.cancel"
"""Inbox event type the store uses to ask the lease holder to cancel a leased run (and the
journal's record of a cancel)."""


def cancel_event(reason: str | None) -> JSONDict:
    """The cancel request queued for a lease holder, or journaled when the store cancels."""
    return {"type": CANCEL_EVENT, "reason": reason}


CHILD_RUN_FAILED = "ChildRunFailed"
"""The error name a parent receives when a child run failed outside its machine (the worker
failed it) or was cancelled by an operator."""


def child_ended_event(invoke_id: str, status: str, output: Any = None, error: Any = None,
                      reason: str | None = None) -> JSONDict:  # fmt: skip
    """What a parent run receives when its child run `invoke_id` ends in `status`, as an
    in-memory parent receives it from a child machine: `xstate.done.actor.<id>` with the
    child's `output` (done, done_partial), else `xstate.error.actor.<id>` with the child
    machine's `error`, or, for a child failed by its worker or cancelled by an operator,
    `{"name": "ChildRunFailed", "message": ...}` with the `reason`."""
    if status in ("done", "done_partial"):
        return {"type": done_actor_event_type(invoke_id), "output": output}
    if error is None:
        error = {"name": CHILD_RUN_FAILED, "message": f"child run {status}: {reason or status}"}
    return {"type": error_actor_event_type(invoke_id), "error": error}


@runtime_checkable
class RunStore(Protocol):
    """Runs and steps: what the runtime and its workers write and read to move runs on."""

    def create_run(
        self, run: NewRun, effects: Sequence[NewEffect], now: int, *,
        children: Sequence[tuple[NewRun, Sequence[NewEffect]]] = (),
        key_once: bool = False,
    ) -> tuple[RunRecord, bool]:
        """Insert a run (version 1) with its initial effects (step 1) in one transaction,
        with the child runs its first step starts (`children`, parents before their own).

        If `run.key` is set and an active run of the same workflow already has that key, nothing
        is written and that run is returned with `False`. With `key_once`, so is the newest
        top-level run with the key that has ended: decided atomically with the insert (under a
        lock per key), so a run that ends while this start runs still counts.
        """
        ...

    def get_run(self, run_id: str) -> RunRecord:
        """The run with this id, or `RunNotFoundError`."""
        ...

    def find_run(self, workflow_name: str, key: str) -> RunRecord | None:
        """The active run of `workflow_name` with idempotency key `key`, if any."""
        ...

    def cancel_run(self, run_id: str, now: int, reason: str | None = None, *,
                   cancelled: list[str] | None = None) -> str:  # fmt: skip
        """Cancel a run: `"cancelled"` if done now, `"requested"` if a worker holds its lease (a
        cancel event is queued for it), `"finished"` if the run had already ended. Its active
        child runs are cancelled with it, recursively. `cancelled` (see `commit_steps`) gets
        the run's workflow name too when this call cancelled it."""
        ...

    def send_event(self, run_id: str, event: Mapping[str, Any], now: int, *,
                   traceparent: str | None = None) -> int:
        """Queue an event for an active run (with the sender's `traceparent`); return its
        inbox id. `RunFinishedError` if the run has ended, `RunNotFoundError` if it does not
        exist."""
        ...

    def send_delivery(self, run_id: str, event: Mapping[str, Any], now: int, delivery_id: str,
                      *, traceparent: str | None = None) -> tuple[int, bool]:  # fmt: skip
        """`send_event` at most once per run and `delivery_id` (a webhook's delivery id): the
        delivery is recorded durably with the queued event, in its transaction. Returns the
        inbox id and True, or, for a delivery already recorded, the inbox id its event got and
        False (nothing queued, whatever the run's status now)."""
        ...

    def pending_events(self, run_id: str) -> list[InboxEvent]:
        """Events queued for the run, oldest first."""
        ...

    def send_and_step(self, run_id: str, event: Mapping[str, Any], now: int,
                      step: Callable[[RunRecord, PendingWork], StepCommit | None], *,
                      traceparent: str | None = None, cancelled: list[str] | None = None,
                      rest: RunRecord | None = None,
                      finish: CallFinish | None = None) -> tuple[int, int | None]:  # fmt: skip
        """`send_event` with the step that applies the event folded into its transaction:
        the run's row is locked, the event queued, and `step` is handed the run with its
        pending work (the event last in its inbox); the `StepCommit` it returns, if any, is
        written in the same transaction exactly as `commit_steps` writes it (consuming the
        event), else the event stays queued and idle workers are woken for it. Returns the
        inbox id and the run's new version, None when the event was left queued.
        `RunFinishedError`/`RunNotFoundError` as `send_event` (nothing written); an exception
        from writing the step rolls back the whole transaction (nothing queued either).

        `rest` is the run's row as the caller last committed it, at rest (`persistence.resting`):
        a store may first hand `step` that run with only the event as its pending work, and
        write the unleased commit it returns (without child runs or deliveries) only if the run
        is still exactly so: at `rest.version` with its snapshot and definition, active, held
        by nobody, no event queued and no effect pending (PostgreSQL: one round trip, the event
        recorded as applied, its inbox id drawn but no row left). If it is not, nothing of that
        step is written and the call goes on as without `rest` (`step` is called again, with
        the run as locked now).

        With `finish`, the event is the result of that call (`persistence.calls`): its end is
        recorded first, under the run's lock, and the event queued (with the call's key) only
        if `finish.owner` still holds the call at `finish.attempt`: else nothing is queued or
        stepped and (0, None) is returned (the call was stopped, or taken over)."""
        ...

    def claim_runs(
        self,
        owner: str,
        now: int,
        lease_ms: int,
        limit: int,
        versions: Collection[tuple[str, str]] | None = None,
    ) -> list[RunRecord]:
        """Lease up to `limit` runs that need work: due (`wake_at <= now`, which includes expired
        leases) or with queued events and no live lease. `versions` restricts to
        `(workflow_name, workflow_version)` pairs the caller can step (None: any)."""
        ...

    def claim_work(self, owner: str, now: int, lease_ms: int, limit: int,
                   versions: Collection[tuple[str, str]] | None = None
                   ) -> list[tuple[RunRecord, PendingWork]]:  # fmt: skip
        """`claim_runs` with each claimed run's `pending_work`, read after the lease is set (in
        the same round trip where the database allows); what a worker does. Unlike
        `claim_runs`, a claimed row that does not parse is returned leased, with its `problem`
        set, for the worker to fail (`fail_run`) with its telemetry: the failure's log line,
        the run's error workflow, the children it cancels counted."""
        ...

    def heartbeat(self, owner: str, run_ids: Collection[str], now: int, lease_ms: int) -> set[str]:
        """Extend the leases `owner` still holds among `run_ids`; return those ids."""
        ...

    def release(self, run_id: str, owner: str, wake_at: int | None, *,
                attempt_count: int | None = None, last_error: str | None = None) -> bool:
        """Give up a lease without stepping; `wake_at` is when the run next needs a worker
        (a transient failure: its backoff, with the attempt and error shown on the row).
        False if `owner` no longer held it."""
        ...

    def fail_run(self, run_id: str, owner: str, reason: str, now: int, *,
                 outcomes: Sequence[EffectOutcome] = (),
                 start_runs: Sequence[tuple[NewRun, Sequence[NewEffect]]] = (),
                 attempt_count: int | None = None, cancelled: list[str] | None = None,
                 error_traceback: str | None = None) -> bool:
        """End a run leased by `owner` as `error` with `reason`, without rewriting its snapshot
        (which may be what cannot be stored or read): record `outcomes` (so those effects never
        run again), dead-letter its queued events, journal the failure and create `start_runs`
        (its error workflow), in one transaction; `attempt_count`, when given, is shown on the row
        (the call made that many attempts), `error_traceback` beside `reason`. Its active child
        runs are cancelled (`cancelled`: see `commit_steps`). False if `owner` no longer held
        it."""
        ...

    def error_traceback(self, run_id: str) -> str | None:
        """The traceback recorded with the run's `last_error` when code of its machine raised
        and failed it (`StepCommit.error_traceback`, `fail_run`); None if none was."""
        ...

    def resume_run(self, run_id: str, expected_version: int, snapshot: JSONDict, state: str,
                   now: int, *, withdraw: tuple[str, str] | None = None) -> RunRecord:
        """Make a failed run active again from `snapshot` (the state it failed in): its failed
        effects of the last step that had any are pending again, it is due now, and the resume
        is journaled. `RunFinishedError` unless the run is `error` at `expected_version`.
        `withdraw=(parent run id, event type)` (a child run's resume) takes back, in the same
        transaction, the queued event that reported its failure to its parent: `ConflictError`
        if the parent has applied it, ended, or a worker holds it."""
        ...

    def sweep_dead_letters(self, now: int) -> list[DeadLetter]:
        """Turn live events of ended runs (sent while the run was ending) into dead letters;
        return them."""
        ...

    def commit_step(self, commit: StepCommit, now: int) -> int:
        """Write one step atomically (see `StepCommit`); return the run's new version."""
        ...

    def commit_steps(self, commits: Sequence[StepCommit], now: int, *,
                     cancelled: list[str] | None = None) -> list[int | None]:  # fmt: skip
        """Write the steps of several runs in one transaction (one commit to disk), each under
        its own lease and version check: per commit, the run's new version, or None where that
        step was not written (nothing of it is; the others are). One commit per run.

        `cancelled`, when given, receives the workflow name of each run the written steps
        cancelled as descendants (`stop_children`, recursively; not a run whose lease holder
        was asked instead, which its own step ends), once the transaction has committed: what
        the caller counts as finished."""
        ...

    def pending_work(self, run_ids: Collection[str]) -> dict[str, PendingWork]:
        """Pending effects and queued events of each run (what a worker reads after a claim),
        in one round trip where the database allows; every id is a key of the result."""
        ...

    def read_work(self, run_ids: Collection[str]) -> list[tuple[RunRecord, PendingWork]]:
        """The runs among `run_ids` that exist, each with its `pending_work`, read without
        taking a lease (one round trip where the database allows): what a worker steps with
        an `unleased` commit when a sent event names the run."""
        ...


@runtime_checkable
class RunQueries(Protocol):
    """Operator queries: listing, searching, counting and showing runs, and the reports."""

    def list_runs(
        self,
        status: str | None = None,
        workflow_name: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[RunRecord]:
        """Runs, newest first, optionally filtered by status and workflow name."""
        ...

    def search_runs(self, query: RunQuery, limit: int = 50, offset: int = 0) -> list[RunRecord]:
        """Runs matching `query`, newest first (the operator's runs list)."""
        ...

    def count_runs(self) -> dict[str, int]:
        """Number of runs per status."""
        ...

    def count_matching(self, query: RunQuery) -> dict[str, int]:
        """Number of runs matching `query`, per status."""
        ...

    def run_groups(
        self, column: str, workflow_name: str | None = None
    ) -> list[tuple[str, str, int]]:
        """(value of `column`, status, number of runs) for every group of runs, optionally of
        one workflow; `column` is one of `GROUP_COLUMNS`."""
        ...

    def list_effects(
        self, run_id: str, status: str | None = None, *, last: int | None = None
    ) -> list[EffectRecord]:
        """The run's outbox records in (step, index) order, optionally only one status; with
        `last`, only the newest `last` of them (still in order)."""
        ...

    def list_events(self, run_id: str, *, last: int | None = None) -> list[EventRecord]:
        """The run's journal, oldest first; with `last`, only its newest `last` entries."""
        ...

    def count_events(self, run_id: str) -> int:
        """How many entries the run's journal has."""
        ...

    def event_progress(self, run_id: str, inbox_id: int) -> EventProgress:
        """Where the event queued for `run_id` as inbox row `inbox_id` stands: still queued,
        applied (by which step, into which state: its journal entry), or dead-lettered."""
        ...

    def match_ids(self, query: RunQuery, after: str | None = None,
                  limit: int = 500) -> list[str]:  # fmt: skip
        """Ids of up to `limit` runs matching `query`, in id order, after the id `after`: the
        pages of a bulk action, stable whatever the action does to the runs it has passed."""
        ...

    def search_attributes(self, run_id: str) -> dict[str, str]:
        """The run's search attributes as stored (name -> value)."""
        ...

    def dead_letters(self, run_id: str) -> list[DeadLetter]:
        """Events queued for the run that can no longer be applied, oldest first."""
        ...

    def stuck_runs(self, now: int, older_than_ms: int, limit: int = 100) -> list[RunRecord]:
        """Active runs whose row was not updated for `older_than_ms` and that wait for no
        timer due within that time (a run asleep until a later timer is waiting, not stuck;
        the same rule as `RunQuery.stuck_before`)."""
        ...

    def unknown_versions(self, known: Collection[tuple[str, str]]) -> list[VersionCount]:
        """Active runs grouped by (name, version) for versions not in `known`."""
        ...


@runtime_checkable
class Coordination(Protocol):
    """Coordination between workers: one-at-a-time claims, circuit breakers, schedules, and
    the wake-up of idle workers."""

    def wakeup(self) -> Wakeup:
        """The signal that work arrived, which idle workers wait on: notified by every start of
        a run due at once and every sent event through a store on this database in this
        process, and on PostgreSQL from other processes too (`NOTIFY`)."""
        ...

    def watch(self, run_id: str, seconds: float) -> bool:
        """Ask for `wakeup().progressed(run_id)` at each step of the run any process commits,
        until `unwatch` (or `seconds` from now, if the waiter is killed): True where the store
        can (PostgreSQL), False where the waiter must read again on its own (SQLite)."""
        ...

    def unwatch(self, run_id: str) -> None:
        """Stop `watch`ing the run."""
        ...

    def try_claim(
        self, name: str, owner: str, now: int, stale_after_ms: int, run_id: str | None = None
    ) -> bool:
        """Take the "one at a time" claim `name` if free, stale, or already ours (refreshes it)."""
        ...

    def release_claim(self, name: str, owner: str) -> bool:
        """Drop the claim if `owner` holds it."""
        ...

    def get_claim(self, name: str) -> ClaimRecord | None:
        """The current holder of claim `name`, if any (it may be stale)."""
        ...

    def get_breaker(self, name: str) -> BreakerRecord | None:
        """Circuit-breaker state for `name`, if recorded."""
        ...

    def put_breaker(self, record: BreakerRecord, expected_version: int, now: int) -> bool:
        """Compare-and-set breaker state: write `record` at `expected_version + 1` if the stored
        version is `expected_version` (0 = must not exist yet). False if someone else won."""
        ...

    def get_schedule(self, name: str) -> ScheduleRecord | None:
        """The scheduled start `name`, if it ever fired."""
        ...

    def list_schedules(self, limit: int = 100) -> list[ScheduleRecord]:
        """The scheduled starts that ever decided a slot, by name (at most `limit`)."""
        ...

    def fire_schedule(
        self,
        name: str,
        expected_version: int,
        fire_at: int,
        run: NewRun,
        effects: Sequence[NewEffect],
        now: int,
        *,
        children: Sequence[tuple[NewRun, Sequence[NewEffect]]] = (),
        buffered_at: int | None = None,
        skipped: Sequence[Mapping[str, Any]] = (),
    ) -> RunRecord | None:
        """Advance schedule `name` to `fire_at` and create `run` (and the child runs its first
        step starts), in one transaction; `run` becomes the schedule's last run, `buffered_at`
        its buffered slot, and `skipped` (skip records) is appended to its skips. None (and
        nothing written) if the schedule is no longer at `expected_version` (0 = never
        fired)."""
        ...

    def skip_schedule(self, name: str, expected_version: int, decided_to: int, now: int, *,
                      buffered_at: int | None,
                      skipped: Sequence[Mapping[str, Any]]) -> bool:  # fmt: skip
        """Advance schedule `name` to `decided_to` without starting a run: its slots up to
        there were skipped (`skipped`, appended to its skips) or buffered (`buffered_at`).
        False (and nothing written) if the schedule is no longer at `expected_version`."""
        ...


@dataclass(slots=True)
class ReencryptReport:
    """What `reencrypt_payloads` did."""

    rewritten: int = 0
    """Payloads now sealed with the current key."""
    changed: int = 0
    """Payloads rewritten by someone else between the read and the write (a worker's step,
    which seals with its own current key): left to them."""
    unreadable: dict[str, int] = field(default_factory=dict)
    """Payloads that did not open, by the key id they are sealed with: left as they are."""
    problems: list[str] = field(default_factory=list)
    """The first few of those, each naming its run and column."""

    def note(self, problem: str, keep: int = 20) -> None:
        """Keep `problem` among the first `keep`."""
        if len(self.problems) < keep:
            self.problems.append(problem)


class PayloadCodec(Protocol):
    """What seals a payload into a JSON envelope and opens it again, bound to its run and
    column (`persistence.stores.codec.KeyRing`: AES-GCM with rotating keys)."""

    current: str
    """The id of the key new payloads are sealed with."""

    def seal(self, value: Any, run_id: str, column: str) -> dict[str, Any]:
        """`value` (JSON-able) as an envelope (a JSON object with `SEALED` and `ct`)."""
        ...

    def open(self, envelope: Mapping[str, Any], run_id: str, column: str) -> Any:
        """The value an envelope holds; a `StoreError` naming the key if it cannot."""
        ...


@runtime_checkable
class Payloads(Protocol):
    """Encrypted payloads (`persistence.stores.codec`): the codec a store seals with."""

    def use_codec(self, ring: PayloadCodec | None, *, show_sealed: bool = False) -> None:
        """Seal payload columns with `ring`'s current key and open them with any of its keys
        (None: write in clear); with `show_sealed`, a payload whose key is missing reads as a
        marker saying so instead of raising `PayloadKeyError` (for display only)."""
        ...

    def reencrypt_payloads(self, batch: int = 500) -> ReencryptReport:
        """Rewrite every payload not sealed with the ring's current key under it, `batch` rows
        per transaction."""
        ...


@runtime_checkable
class Capacity(Protocol):
    """Named limits shared by every worker (persistence/capacity.py): concurrency slots with a
    queue that keeps each waiting run's place, a sliding rate window, and Retry-After pauses.

    A held slot lives as long as the lease of the run that holds it (a SIGKILLed holder's slot
    comes back when its lease expires); a run that must wait is released in the same
    transaction, with the reason on its row and its wake-up time set."""

    def acquire_capacity(self, name: str, holder: str, run_id: str, owner: str, now: int, *,
                         max_in_flight: int | None, calls: int | None, per_ms: int,
                         recheck_ms: int, lease_ms: int) -> Grant:
        """Take a place in limit `name` for `holder` (a call's key, or a run) of `run_id`,
        leased by `owner`: granted (a slot held, a call counted in the rate window), or not
        (the run is queued for a slot in arrival order, its lease released, `waiting_for`
        set and its wake-up time `retry_at`)."""
        ...

    def release_capacity(self, name: str, holders: Collection[str], now: int, *,
                         max_in_flight: int | None, lease_ms: int,
                         owner: str | None = None) -> list[Handover]:
        """Give back `holders`' slots of `name` and hand the freed ones to the first runs in
        the queue. With `owner` (a worker that will step them at once), each freed slot goes
        straight to the next queued run, leased to `owner` in the same transaction and
        returned with its pending work (a `Handover`). Slots no run can be leased for, those
        freed without an owner, and (with no holders) those of holders whose lease expired
        are reserved for the queue's first runs for `lease_ms`, and those runs woken to be
        claimed before any other run."""
        ...

    def pause_capacity(self, name: str, until: int, now: int) -> None:
        """No call through limit `name` before `until` (a downstream's Retry-After), for every
        run; a later pause extends it, an earlier one changes nothing."""
        ...

    def limit_shares(self, name: str, after: str | None = None, count: int = 500) -> list[str]:
        """The stored names of per-key limit `name`'s shares (`name[<key>]`) that hold slots or
        queue runs, in name order after `after`: a page of at most `count`."""
        ...

    def capacity_usage(self, now: int) -> list[LimitUsage]:
        """Every limit in use: calls in flight, runs waiting per reason, pause."""
        ...


@runtime_checkable
class Calls(Protocol):
    """Calls beside their runs (`stores/calls.py`): leased by a worker's call executor, their
    results queued in their runs' inboxes, stopped by the steps that leave their states."""

    def claim_calls(self, owner: str, now: int, lease_ms: int, limit: int,
                    run_id: str | None = None) -> list[CallRecord]:  # fmt: skip
        """Lease up to `limit` due calls (of `run_id` only, if given; or calls whose holder
        stopped renewing its lease), each claim opening the call's next attempt; a call is
        not due while an effect its run recorded at or before its step is pending."""
        ...

    def heartbeat_calls(self, owner: str, beats: Mapping[str, Any], now: int,
                        lease_ms: int) -> set[str]:  # fmt: skip
        """Renew `owner`'s call leases (with heartbeat details); the keys it still holds."""
        ...

    def retry_call(self, key: str, owner: str, attempt: int, now: int, at: int,
                   end: CallEnd) -> bool:  # fmt: skip
        """Give a call back to be attempted again at `at`; False when `owner` lost it."""
        ...

    def note_call_failures(self, key: str, attempt: int, end: CallEnd) -> None:
        """Show on a call's run that the call failed transiently `attempt` times."""
        ...

    def finish_calls(self, ends: Sequence[tuple[CallFinish, str, Mapping[str, Any]]],
                     now: int, step: Callable[[RunRecord, PendingWork], StepCommit | None],
                     cancelled: list[str] | None = None,
                     ) -> list[tuple[int, int | None]]:  # fmt: skip
        """`send_and_step` with its `finish` for each (call end, run id, result event) of a
        burst of ends, all in one transaction (at most one end per run): per end, the inbox id
        and the run's new version (None: queued for a worker; (0, None): dropped, its holder
        no longer held the call)."""
        ...

    def list_calls(self, run_id: str) -> list[CallRecord]:
        """The run's calls, in the order they were recorded."""
        ...

    def call_attempts(self, run_id: str) -> list[CallAttempt]:
        """Every attempt of the run's calls, oldest first."""
        ...

    def open_calls(self, run_ids: Collection[str]) -> dict[str, list[str]]:
        """The call ids of each run's calls that may still deliver a result."""
        ...


@dataclass(frozen=True, slots=True)
class PurgedRun:
    """An ended run a purge deleted (or, in a dry run, would delete)."""

    id: str
    workflow_name: str
    key: str | None
    status: str
    completed_at: int
    parent_run_id: str | None = None


@dataclass(frozen=True, slots=True)
class Tombstone:
    """The business key of a purged top-level run, kept until `expires_at`: a start with it
    answers "already started" with the purged run's id (`RunPurgedError`)."""

    workflow_name: str
    key: str
    run_id: str
    purged_at: int
    expires_at: int


class RunPurgedError(StoreError):
    """A start with a key whose run was purged within the key window: the key's run was
    started (and has ended and been deleted since); nothing was started again."""

    def __init__(self, tombstone: Tombstone) -> None:
        self.tombstone = tombstone
        self.run_id = tombstone.run_id
        super().__init__(f"run {tombstone.run_id} of {tombstone.workflow_name!r} with key "
                         f"{tombstone.key!r} was started, has ended and was purged; not "
                         "started again")  # fmt: skip


@dataclass(frozen=True, slots=True)
class Fork:
    """A run forked from another run's snapshot after journal step `step`."""

    run_id: str
    forked_from: str
    step: int
    created_at: int


FORK_EVENT = "statecharts.fork"
"""Journal record of the first step of a forked run (`Lifecycle.fork_run`)."""
RESET_EVENT = "statecharts.reset"
"""Journal record of a reset of a failed run to an earlier step (`Lifecycle.reset_run`)."""
STOPPED_BY_RESET = "stopped: its run was reset"
PURGE_BATCH = 200
"""Runs one purge transaction deletes at most (short transactions, no long locks)."""


@runtime_checkable
class Lifecycle(Protocol):
    """The run lifecycle around the steps: retention (purge ended runs, keep their keys for a
    while), and fork and reset from a journal step's snapshot (`stores/lifecycle.py`)."""

    def purge_runs(self, ended_before: int, now: int, *, workflow: str | None = None,
                   limit: int = PURGE_BATCH, keep_keys_until: int | None = None,
                   dry_run: bool = False) -> list[PurgedRun]:  # fmt: skip
        """Delete up to `limit` ended runs that ended before `ended_before` (of `workflow`
        only, if given), oldest end first, with everything stored for them (journal, effects,
        inbox and dead letters, calls and their attempts, deliveries, fork links), in one
        short transaction. Never a run with a live parent or a live child, nor one still
        due or held (effects left to run, a lease) or with an open call. A top-level run's
        key is kept as a `Tombstone` until `keep_keys_until` (None: not kept). `dry_run`:
        the runs it would delete, nothing written."""
        ...

    def count_purgeable(self, ended_before: int, *, workflow: str | None = None) -> int:
        """How many runs `purge_runs` would delete in all, batch after batch."""
        ...

    def expire_tombstones(self, now: int, limit: int = PURGE_BATCH) -> int:
        """Delete up to `limit` key tombstones expired by `now`; how many."""
        ...

    def tombstone(self, workflow_name: str, key: str, now: int) -> Tombstone | None:
        """The unexpired tombstone of `key` of `workflow_name`, if its run was purged."""
        ...

    def journal_snapshot(self, run_id: str, step: int) -> tuple[int, JSONDict] | None:
        """(the step, the snapshot after it) of the newest journal step at or before `step`
        that recorded one, or None."""
        ...

    def fork_run(self, run: NewRun, source: str, step: int, effects: Sequence[NewEffect],
                 now: int) -> RunRecord:  # fmt: skip
        """Insert `run` (version 1, from the snapshot after step `step` of run `source`) with
        `effects` (its calls in flight, recorded afresh), linked to `source` (`Fork`), its
        first journal row the fork, in one transaction."""
        ...

    def reset_run(self, run_id: str, expected_version: int, snapshot: JSONDict, state: str,
                  wake_at: int | None, step: int, effects: Sequence[NewEffect], now: int, *,
                  search: Sequence[tuple[str, str]] = ()) -> RunRecord:  # fmt: skip
        """Make the failed run active again from `snapshot` (after its journal step `step`):
        its open calls are stopped and its pending effects skipped, `effects` (the calls in
        flight at that step) recorded afresh at the new version, its search attributes set to
        `search` (those of `snapshot`), and the reset journaled. `RunFinishedError` unless the
        run is `error` at `expected_version`."""
        ...

    def fork_of(self, run_id: str) -> Fork | None:
        """Where run `run_id` was forked from, if it is a fork."""
        ...

    def call_starts(self, run_id: str, call_ids: Collection[str],
                    step: int) -> dict[str, tuple[str, JSONDict]]:  # fmt: skip
        """For each of `call_ids` the run started by step `step`: (outbox kind, the payload
        of its newest start), from its calls or, for a limited call site, its effects."""
        ...


class Store(RunStore, RunQueries, Coordination, Capacity, Calls, Lifecycle, Payloads,
            Protocol):
    """The whole storage contract (the three concerns plus the schema), implemented once in
    SQL by `persistence.stores.sql.SQLStore` for SQLite, PostgreSQL and memory."""

    url: str

    def migrate(self) -> list[int]:
        """Apply missing schema migrations; return the versions applied (empty if current)."""
        ...

    def schema_version(self) -> int:
        """The schema version the database is at (0 for an empty database)."""
        ...

    def check_schema(self) -> None:
        """Raise `SchemaVersionError` unless the schema is exactly the version this code knows."""
        ...

    def clock(self) -> StoreClock:
        """The clock of this store's time base (`persistence.stores.clocks`): what a `Runtime`
        given no clock measures leases and timers by. One per store object."""
        ...

    def close(self) -> None:
        """Release connections. The store is unusable afterwards."""
        ...


def only_version(versions: Sequence[int | None], commit: StepCommit) -> int:
    """The new version `commit_steps` gave the one `commit`; `ConflictError` if not written."""
    (version,) = versions
    if version is None:
        raise ConflictError(
            f"run {commit.run_id}: not at version {commit.expected_version} under lease of "
            f"{commit.owner!r}, or an effect outcome is not pending; step not written"
        )
    return version


def check_last(last: int | None) -> None:
    """`last` of a listing is None (everything) or a count of at least 0."""
    if last is not None and last < 0:
        raise ValueError(f"last must be at least 0, got {last}")


def check_distinct_runs(commits: Sequence[StepCommit]) -> None:
    """One commit per run in a batch (a second would be checked against a stale version)."""
    if len({c.run_id for c in commits}) != len(commits):
        raise ValueError("commit_steps takes at most one commit per run")


def idempotency_key(run_id: str, step: int, index: int) -> str:
    """The outbox key of effect `index` produced by step `step` of run `run_id`."""
    return f"{run_id}:{step}:{index}"


def call_key(outbox_key: str, retry_key: str | None = None, length: int = KEY_LENGTH) -> str:
    """The idempotency key user code gets for the effect recorded as `outbox_key` (the form of
    `statecharts.idempotency`): scoped to the run; for a retried call its record key, the same
    across attempts and crashes, else the effect's own step and index."""
    run_id, _, place = outbox_key.partition(":")  # the format idempotency_key() writes
    return provider_key(run_id, retry_key or place, length)


def run_of_outbox_key(outbox_key: str) -> str:
    """The run id in an outbox key (see `idempotency_key`)."""
    return outbox_key.partition(":")[0]


def completion_times(status: str, now: int) -> tuple[int | None, int | None]:
    """(completed_at, failed_at) to set when a run enters `status`."""
    if status == ACTIVE:
        return None, None
    return now, (now if status == "error" else None)


def check_status(status: str) -> None:
    """Reject an unknown run status with a clear error."""
    if status not in RUN_STATUSES:
        raise ValueError(f"unknown run status {status!r}; expected one of {sorted(RUN_STATUSES)}")


def check_group_column(column: str) -> None:
    """Reject a column `run_groups` cannot group by (it is put into SQL, so never trust it)."""
    if column not in GROUP_COLUMNS:
        expected = sorted(GROUP_COLUMNS)
        raise ValueError(f"cannot group runs by {column!r}; expected one of {expected}")
