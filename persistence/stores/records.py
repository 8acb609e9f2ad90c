"""The store contract's records: the frozen values a store takes and returns (`RunRecord`,
`NewRun`, `StepCommit`, `CallRecord`, ...), the run statuses they hold, and the key limit every
inserted run is held to.

The records every start, step or call builds are frozen `msgspec.Struct`s, as the engine's
`Snapshot` is: built in C, while a frozen dataclass's `__init__` sets each field through
`object.__setattr__` (about 1,300 client instructions a field under callgrind; a workflow of
three calls built some 450 such fields). A changed copy of one is `msgspec.structs.replace`;
the records only listings and the CLI read are frozen dataclasses.

Times are integers: milliseconds since the Unix epoch, as the engine uses. Callers pass `now`
explicitly so a simulated clock drives timers and leases in tests exactly as in production; in
production it is the store's own clock (`Store.clock()`: the database server's time on
PostgreSQL, a monotonic machine clock on SQLite), so that no worker's wall clock decides when a
lease ends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from persistence.stores.errors import StoreEncodingError, StoreError

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
    return (
        f"{key[:40]!r}... is {size} bytes in UTF-8; a run's key is at most {MAX_STORED_KEY_BYTES}"
    )


# gc=False (RunRecord, NewRun, NewEffect, CallRecord): a record holds strings, numbers and
# JSON values, never itself, so it is in no cycle, and the collector need not walk the
# thousands of them that waiting calls, a batch of starts and `Resting` keep (each full
# collection walked every one)
class RunRecord(msgspec.Struct, frozen=True, eq=False, gc=False):
    """One row of `workflow_runs` as read from the store (equal to another with the same
    columns but `previous_owner` and `due_at`, which say how it was claimed: `__eq__`)."""

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
    previous_owner: str | None = None
    """On a claimed run: the lease owner it was taken over from (its lease had expired)."""
    due_at: int | None = None
    """On a claimed run: when it was due (its `wake_at` before the claim), for the claim lag."""

    def __eq__(self, other: object) -> bool:
        # every column but the last two (`previous_owner`, `due_at`), as a dataclass field
        # with compare=False would say (a struct's own equality compares them all)
        if type(other) is not RunRecord:
            return NotImplemented
        return msgspec.structs.astuple(self)[:-2] == msgspec.structs.astuple(other)[:-2]

    def __ne__(self, other: object) -> bool:  # (a struct's own `!=` would not ask `__eq__`)
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]  # (a snapshot is a dict: never hashable)

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


class NewRun(msgspec.Struct, frozen=True, gc=False):
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
            whose = (
                "run key"
                if self.parent_invoke_id is None
                else (
                    f"key of the child run invoked as {self.parent_invoke_id!r} (the parent's key, "
                    "'/', the invoke id)"
                )
            )
            raise StoreEncodingError(f"the {whose} {problem}")


class NewEffect(msgspec.Struct, frozen=True, gc=False):
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


class EffectOutcome(msgspec.Struct, frozen=True):
    """How an executed effect ended; recorded in the same transaction as the step it fed."""

    idempotency_key: str
    status: str
    result: Any = None
    error: str | None = None

    def __post_init__(self) -> None:
        if self.status not in EFFECT_STATUSES - {"pending"}:
            raise ValueError(f"effect outcome status must be done/skipped/failed: {self.status!r}")


class InboxEvent(msgspec.Struct, frozen=True):
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


class PendingWork(msgspec.Struct, frozen=True):
    """What a claimed run has waiting: outbox rows not yet done and queued inbox events."""

    effects: list[EffectRecord]
    inbox: list[InboxEvent]
    problem: str | None = None
    """Why some of it cannot be read (an encrypted payload whose key is missing): the run is
    then failed with this text, never stepped without it."""


class JournalEntry(msgspec.Struct, frozen=True):
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


class CallRecord(msgspec.Struct, frozen=True, gc=False):
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
    waiting_for: str | None = None
    """Why a pending call waits for its limit ("waiting for capacity: crm"): it asked for a
    place and was refused; None otherwise."""
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


class CallFinish(msgspec.Struct, frozen=True):
    """A call's end as the send of its result records it (`RunStore.send_and_step`)."""

    key: str
    owner: str
    attempt: int
    status: str
    """`done` or `failed`."""
    end: CallEnd


class CallEnd(msgspec.Struct, frozen=True):
    """How an attempt ended, as `finish_call` and `retry_call` record it."""

    outcome: str
    error_name: str | None = None
    message: str | None = None
    traceback: str | None = None


class StepCommit(msgspec.Struct, frozen=True):
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
    search: Mapping[str, str | None] = msgspec.field(default_factory=dict)
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


CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
"""The states of a shared circuit breaker (`BreakerRecord.state`, `persistence.breakers`)."""


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


@dataclass(frozen=True, slots=True)
class Grant:
    """A store's answer to a call asking for a named limit's capacity (`Capacity`)."""

    granted: bool
    retry_at: int | None = None
    """Not granted: when the run looks again (a freed slot wakes a queued run sooner)."""
    reason: str | None = None
    """Not granted: what the run waits for, as shown on its row ("waiting for capacity: crm")."""
    released: tuple[str, ...] = ()
    """Not granted, a call asking: the keys of other calls its executor had claimed and not
    started that the refusal queued with it (released, waiting): the executor drops them."""


@dataclass(frozen=True, slots=True)
class LimitUsage:
    """One named limit now: calls in flight, runs waiting for it (by reason), its pause."""

    name: str
    in_flight: int = 0
    waiting: Mapping[str, int] = field(default_factory=dict)
    paused_until: int | None = None


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


def in_state(state_column: str, path: str) -> bool:
    """True when one of the comma-separated active leaves is `path` or inside it."""
    return any(leaf == path or leaf.startswith(path + ".") for leaf in state_column.split(","))


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
        super().__init__(
            f"run {tombstone.run_id} of {tombstone.workflow_name!r} with key "
            f"{tombstone.key!r} was started, has ended and was purged; not "
            "started again"
        )


@dataclass(frozen=True, slots=True)
class Fork:
    """A run forked from another run's snapshot after journal step `step`."""

    run_id: str
    forked_from: str
    step: int
    created_at: int
