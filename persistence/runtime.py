"""`Runtime`: start runs, send them events, read and cancel them; the API over a store.

The runtime never executes effects itself: `start` commits the initial snapshot with its effects
in one transaction and workers (`persistence.worker.Worker`) do the rest. Any process holding a
`Runtime` over the same database may start runs or send events while workers run elsewhere.
"""

from __future__ import annotations

import builtins
import contextvars
import logging
import os
import socket
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypedDict, get_args, overload

from persistence.breakers import BreakerPolicy, SharedBreaker
from persistence.capacity import Limit, LoadControl, check_priority
from persistence.children import (
    child_key,
    child_work,
    ended_delivery,
    nested_machines,
    snapshot_invokes,
)
from persistence.columns import run_columns, state_text
from persistence.driver import RunDriver, leased_calls
from persistence.lifecycle import (
    DEFAULT_KEY_WINDOW,
    Duration,
    PurgeReport,
    Retention,
    duration_ms,
    purge,
)
from persistence.lifecycle import fork as fork_run
from persistence.lifecycle import reset as reset_run
from persistence.local_calls import BatchLease, LocalExecutors, OwnedCallTaker
from persistence.outbox import Listener, log_effects, to_outbox
from persistence.planning import CallTaker
from persistence.resting import Resting
from persistence.search import check_fields, declared_fields, search_terms, values_of
from persistence.stores import (
    ConflictError,
    DeadLetter,
    NewEffect,
    NewRun,
    RunNotFoundError,
    RunQuery,
    RunRecord,
    Store,
    VersionCount,
)
from persistence.stores.protocol import PayloadCodec
from persistence.stores.records import Fork, RunPurgedError
from persistence.stores.rules import TRANSIENT_PREFIX, is_call, leasable_calls
from persistence.stores.run_ids import new_run_id
from persistence.telemetry import Telemetry
from persistence.waiting import Answer, Ended, check_timeout, wait_applied, wait_ended
from statecharts import Machine, Snapshot
from statecharts.effects import Effect, StartChild
from statecharts.events import EventLike, error_actor_event_type, normalize_event
from statecharts.frozen import storable_text, text_problem, thaw
from statecharts.limits import shorten
from statecharts.snapshot import FINISHED

log = logging.getLogger(__name__)


class Clock(Protocol):
    """Anything with `now()` in epoch milliseconds: the store's clock (the default,
    `Store.clock()`: leases and timers in the database's time base, never stepping back),
    statecharts' `SimulatedClock` for tests or `SystemClock`. Workers only read the time; they
    never schedule on the clock."""

    def now(self) -> int:
        """Current time, epoch milliseconds."""
        ...


class UnknownWorkflowError(LookupError):
    """`start` named a workflow this runtime was not given."""


class NotResumableError(ValueError):
    """`resume` was asked for a run that has not failed, whose snapshot does not restore, or
    a child run whose parent no longer waits for its result (it would get a second one)."""


class RunActiveError(ValueError):
    """`start(key=..., reuse="reject_active")` while a run of that workflow with that key is
    active. `run` is that run's row."""

    def __init__(self, run: RunRecord) -> None:
        self.run = run
        super().__init__(
            f"run {run.id} of {run.workflow_name!r} with key {run.key!r} is "
            "active; not started again"
        )


PreparedRun = tuple[NewRun, list[NewEffect], tuple[Effect, ...]]
"""A run's row to insert, its outbox records and all its effects (`Runtime.prepare_run`)."""

START_BATCH = 500
"""How many runs `start_many` writes per transaction."""
START_WRITERS = 2
"""How many of `start_many`'s transactions are written at once: one batch's rows are encoded
while another's statement runs."""

MAX_KEY_BYTES = 512
"""The longest key `start` takes, in UTF-8 bytes: a run's key must fit the database's index of
active keys (PostgreSQL's B-tree holds entries of up to 2,704 bytes) with room for the keys
of the child runs derived from it."""


class InvalidKeyError(ValueError):
    """`start` was given a key no run could be found by again (empty, with a `/`, too long,
    not storable text); the message names the key and why."""


def check_key(key: object) -> str:
    """`key` if `start` may take it, else `InvalidKeyError` naming it and why. Refused: a
    non-string, the empty string and keys with a `/` (the ingress addresses a run by its key
    in one URL path segment, and `<parent key>/<invoke id>` is the form of the keys the
    runtime derives for child runs, which a user's key must not take), keys over
    `MAX_KEY_BYTES` and text no store holds (NUL, lone surrogates)."""
    if not isinstance(key, str):
        raise InvalidKeyError(f"key {key!r}: a key must be a string")
    shown = shorten(repr(key), 40)
    if not key.strip():
        raise InvalidKeyError(f"key {shown}: a key must not be empty or blank")
    problem = text_problem(key)
    if problem is not None:
        raise InvalidKeyError(f"key {shown}: {problem}")
    if "/" in key:
        raise InvalidKeyError(
            f"key {shown}: a key must not contain '/' (runs are addressed by "
            "key in one URL path segment, and child runs' keys are "
            "'<parent key>/<invoke id>')"
        )
    size = len(key.encode())
    if size > MAX_KEY_BYTES:
        raise InvalidKeyError(f"key {shown}: {size} bytes, over the {MAX_KEY_BYTES} a key may have")
    return key


KeyReuse = Literal["use_existing", "allow_duplicate", "reject_active"]
"""What `start(name, key=K)` does when a run of `name` with key K already exists:

- `"use_existing"` (the default): return that run, whether active or ended; the key is the
  run's handle for ever (DBOS's workflow id, Temporal's "reject duplicate" + "use existing").
- `"allow_duplicate"`: return the active run while there is one; once the previous run has
  ended, start a new one (Temporal's "allow duplicate").
- `"reject_active"`: raise `RunActiveError` while a run with the key is active; once it has
  ended, start a new one (Temporal's "allow duplicate" with conflict policy "fail").
"""


@dataclass(frozen=True, slots=True)
class TransientBackoff:
    """How a run whose call site failed transiently (`"transient"` on the invoke) is released:
    due again after `first_ms`, doubling up to `max_ms`. `max_attempts` counts every call, the
    first included (as a retry policy's `max_attempts`): when the call has failed transiently
    that many times in a row the run fails with the last error (an operator can `resume` it)."""

    first_ms: int = 500
    max_ms: int = 60_000
    max_attempts: int = 10

    def wait_ms(self, attempt: int) -> int:
        """The wait after transient failure number `attempt` (1-based)."""
        return int(min(self.first_ms * 2 ** min(attempt - 1, 40), self.max_ms))

    def attempt_after(self, run: RunRecord) -> int:
        """The number of this transient failure, from the row (attempt and error columns)."""
        previous = run.last_error or ""
        return run.attempt_count + 1 if previous.startswith(TRANSIENT_PREFIX) else 1


class ErrorDetail(TypedDict):
    """A failed run's error: the exception's class name and its message."""

    name: str
    message: str


class ErrorWorkflowInput(TypedDict):
    """The input an error workflow is started with, the same from every runner (the durable
    runtime here, `machines.local.LocalRunner` in memory); documented in docs/persistence.md.

    `run_id`: the failed run's id; `workflow`: its workflow name; `key`: the key it was started
    with (None if none); `state`: its active leaf paths, comma separated; `error`: what failed
    it; `failed_at`: when (epoch ms, the runtime's clock); `dry_run`: whether the runtime that
    ran it was in dry-run.
    """

    run_id: str
    workflow: str
    key: str | None
    state: str
    error: ErrorDetail
    failed_at: int
    dry_run: bool


def error_detail(error: Any) -> ErrorDetail:
    """`error` (an engine error's JSON, or the one-line text `Name: message` stored in a run's
    `last_error`) as an `ErrorDetail`."""
    if isinstance(error, Mapping):
        return {
            "name": str(error.get("name") or "Error"),
            "message": str(error.get("message") or ""),
        }
    text = "" if error is None else str(error)
    name, sep, message = text.partition(": ")
    if sep and name.isidentifier():
        return {"name": name, "message": message}
    return {"name": "Error", "message": text}


def error_run_key(run_id: str) -> str:
    """The key of the error-workflow run started when run `run_id` failed."""
    return f"error-of:{run_id}"


def error_workflow_input(
    run_id: str,
    workflow: str,
    key: str | None,
    state: str,
    error: Any,
    failed_at: int,
    dry_run: bool,
) -> ErrorWorkflowInput:
    """The `ErrorWorkflowInput` about a failed run (every runner builds it here)."""
    return {
        "run_id": run_id,
        "workflow": workflow,
        "key": key,
        "state": state,
        "error": error_detail(thaw(error)),
        "failed_at": failed_at,
        "dry_run": dry_run,
    }


class Runtime:
    """Durable runs of `machines` in `store`.

    Several definitions of one machine id may be given (for example the old one while its runs
    drain during a deploy); `start` uses the last one. Runs are pinned to the definition
    fingerprint they started with (`workflow_version`); a definition also steps runs of older
    versions it has a migration for (`migrations=` on the machine).

    A machine names an error workflow with `meta={"error_workflow": "name"}` at its root (or
    `error_workflows={"invoice": "invoice_failed"}` here): each time one of its runs fails, that
    workflow is started exactly once, in the transaction that records the failure, with an
    `ErrorWorkflowInput` (`run_id`, `workflow`, `key`, `state`, `error`, `failed_at`,
    `dry_run`). Invokes that name a `breaker` go through a
    circuit breaker shared by all workers (`breakers={"payments": BreakerPolicy(...)}`).

    Invokes that name a `limit` go through that limit, shared by all workers
    (`limits={"crm": Limit(max_in_flight=4)}`; `workflow_limits={"backfill": "crm"}` limits
    how many runs of a workflow are stepped at once); a run that must wait is released and
    queued, "waiting for capacity: crm" on its row (persistence/capacity.py). `priorities=`
    gives workflows a default priority (0-1000, higher claimed first, with aging; see
    `start`).

    `send` applies an event to a run at rest (active, no worker holding it, nothing queued
    before it, no effects waiting to run) in its own transaction, as the step a worker would
    take for it; `step_in_send=False` always queues it for a worker instead. `send(...,
    wait=SECONDS)` returns once the step that applied the event has committed, and
    `wait(run_id)` once the run has ended (`persistence.waiting`).

    A machine names fields of its context to index with `meta={"search": ["customer"]}` at
    its root (or `search={"invoice": ["customer"]}` here, which wins): its runs are found by
    them (`RunQuery(search=...)`, `runs list --where customer=42`), each step writing, in its
    transaction, the values it changed (`persistence.search`).

    With `dry_run=True`, effects declared external (invokes with `"external": true`, functions
    marked with `statecharts.external`) are not executed: they are recorded as `skipped` with the
    result `"dry-run"` (an external invoke returns `"dry-run"` as its output), while every store
    write (runs, state, outbox, journal) happens exactly as in production.

    `retention={"invoice": timedelta(days=30)}` (or `meta={"retention": "30d"}` at a machine's
    root) keeps a workflow's ended runs that long: workers purge older ones as they go
    (`apply_retention`); a purged run's key keeps answering `start` with the purged run for
    `key_window` (default 7 days). `purge`, `fork` and `reset` are the on-demand operations
    (docs/persistence.md, "Run lifecycle").

    `codec=KeyRing(...)` encrypts the payloads the store writes (snapshots with their context,
    inputs and outputs, outbox payloads and results, inbox events, journal events, call
    inputs) with AES-GCM, and opens them with any of the ring's keys; state names, keys,
    statuses and times stay in clear (`persistence.stores.codec`). It is set on `store`, so
    every process writing to it needs the same ring (`keys_from_env` reads it from
    `STATECHARTS_KEYS` or `STATECHARTS_KEYS_FILE`, as the CLI's workers do). None leaves the
    store as it is.
    """

    def __init__(
        self,
        store: Store,
        machines: Sequence[Machine],
        *,
        clock: Clock | None = None,
        journal: bool = True,
        dry_run: bool = False,
        check_schema: bool = True,
        error_workflows: Mapping[str, str] | None = None,
        breakers: Mapping[str, BreakerPolicy] | None = None,
        transient: TransientBackoff | None = None,
        telemetry: Telemetry | None = None,
        limits: Mapping[str, Limit] | None = None,
        workflow_limits: Mapping[str, str] | None = None,
        priorities: Mapping[str, int] | None = None,
        step_in_send: bool = True,
        retention: Mapping[str, Duration] | None = None,
        key_window: Duration = DEFAULT_KEY_WINDOW,
        codec: PayloadCodec | None = None,
        search: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        if not machines:
            raise ValueError("Runtime needs at least one machine")
        if codec is not None:
            store.use_codec(codec)
        self.store = store
        self.clock: Clock = clock if clock is not None else store.clock()
        self.journal = journal
        self.dry_run = dry_run
        self.transient = transient or TransientBackoff()
        self.telemetry = telemetry if telemetry is not None else Telemetry()
        self.step_in_send = step_in_send
        self._senders = threading.local()  # each sending thread's driver (`send`)
        self._local_calls = LocalExecutors()
        """The call executors serving in this process (`attach_executor`)."""
        self.resting = Resting()
        """The runs this runtime started or sent to, with their rows as committed here when
        left at rest (`send` steps from them)."""
        self._sender_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._latest: dict[str, Machine] = {}
        self._exact: dict[tuple[str, str], Machine] = {}
        self._by_label: dict[tuple[str, str], Machine] = {}
        self.listeners: dict[str, list[Listener]] = {}
        self._legacy: dict[tuple[str, str], Machine] = {}
        for machine in machines:
            self._latest[machine.id] = machine
        for machine in [*nested_machines(machines), *machines]:  # the given ones win
            self._latest.setdefault(machine.id, machine)
            self._exact[(machine.id, machine.fingerprint)] = machine
            legacy = machine.definition.legacy_fingerprint
            if legacy and legacy != machine.fingerprint:
                self._legacy[(machine.id, legacy)] = machine
            for label in machine.migrations:
                self._by_label[(machine.id, label)] = machine
        unsupported = [path for m in self._exact.values() for path in snapshot_invokes(m)]
        if unsupported:
            raise ValueError(
                f"{', '.join(unsupported)}: onSnapshot of a child machine is not "
                "supported in durable runs (docs/persistence.md, Child runs)"
            )
        self.error_workflows = self._error_workflows(error_workflows or {})
        self.retention = Retention.of(list(self._latest.values()), retention or {}, key_window)
        self.search_fields = self._search_fields(search or {})
        """Workflow -> the context fields indexed as its search attributes
        (`persistence.search`): from each definition's `meta.search`, overridden by `search=`."""
        self.breaker_policies = dict(breakers or {})
        self.load = LoadControl(store, machines, limits or {}, workflow_limits or {})
        self.priorities = {
            name: check_priority(p, f"priorities[{name!r}]")
            for name, p in (priorities or {}).items()
        }
        if check_schema:
            store.check_schema()
            if clock is None:
                self.clock.now()  # the store clock's anchor read now, not in the first step

    def _error_workflows(self, given: Mapping[str, str]) -> dict[str, str]:
        """Workflow -> its error workflow: from each machine's `meta.error_workflow`, overridden
        by `error_workflows=`; every target must be one of this runtime's machines."""
        found = {
            m.id: str(m.root.meta["error_workflow"])
            for m in self._latest.values()
            if isinstance(m.root.meta, Mapping) and m.root.meta.get("error_workflow")
        }
        found.update(given)
        for workflow, target in found.items():
            if target not in self._latest:
                raise ValueError(
                    f"error workflow of {workflow!r} is {target!r}, which is not among the "
                    f"runtime's machines ({', '.join(sorted(self._latest))})"
                )
        return found

    def _search_fields(self, given: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
        """Workflow -> its search attributes; every workflow named in `given` must be one of
        this runtime's machines."""
        found = {m.id: fields for m in self._exact.values() if (fields := declared_fields(m))}
        for workflow, names in given.items():
            if workflow not in self._latest:
                raise ValueError(
                    f"search={{{workflow!r}: ...}}: {workflow!r} is not among the "
                    f"runtime's machines ({', '.join(sorted(self._latest))})"
                )
            found[workflow] = check_fields(names, f"search[{workflow!r}]")
        return found

    def search_values(self, workflow: str, snapshot: Snapshot) -> tuple[tuple[str, str], ...]:
        """A new run's search attributes, from its first snapshot's context."""
        fields = self.search_fields.get(workflow)
        return tuple(values_of(fields, snapshot.context).items()) if fields else ()

    def breaker(self, name: str) -> SharedBreaker:
        """The shared circuit breaker of downstream `name` (default policy unless given in
        `breakers=`)."""
        return SharedBreaker(self.store, name, self.breaker_policies.get(name, BreakerPolicy()))

    def error_run(
        self, run: RunRecord, state: str, error: str | None, now: int
    ) -> builtins.list[tuple[NewRun, builtins.list[NewEffect]]]:
        """The error-workflow run to start, in the same transaction, when `run` fails, followed
        by the child runs its first step starts; empty if its workflow names none. Runs of an
        error workflow never start one (no loops)."""
        target = self.error_workflows.get(run.workflow_name)
        if target is None or run.workflow_name in self.error_workflows.values():
            return []
        failure = error_workflow_input(
            run.id, run.workflow_name, run.key, state, error, now, self.dry_run
        )
        # a new trace, linked to the failed run's: one run, one trace
        key = error_run_key(run.id)
        with self.telemetry.starting(target, key, link=run.traceparent) as begun:
            new, outbox, effects = self.prepare_run(
                target, failure, key, now, traceparent=begun.traceparent
            )
            begun.run(new.id, True)
        return [(new, outbox), *self.child_runs(new.id, new.key, effects, now, new.traceparent)]

    def child_runs(
        self,
        parent_id: str,
        parent_key: str | None,
        starts: Iterable[Effect],
        now: int,
        traceparent: str | None = None,
    ) -> builtins.list[tuple[NewRun, builtins.list[NewEffect]]]:
        """The child runs that the `StartChild` effects of child machines among `starts`
        create (with the step that made them), each followed by the child runs its own first
        step starts: rows to insert in this order. The child joins its parent's trace."""
        rows: builtins.list[tuple[NewRun, builtins.list[NewEffect]]] = []
        for start in starts:
            if not isinstance(start, StartChild) or not isinstance(start.logic, Machine):
                continue
            machine = start.logic
            if start.sync_snapshot:
                log.warning(
                    "run %s: spawn_child(%r, sync_snapshot=True): a child run does not "
                    "report its snapshots (docs/persistence.md, Child runs)",
                    parent_id,
                    start.id,
                )
            snapshot, effects = machine.initial_transition(thaw(start.input), now)
            outbox = to_outbox(effects)
            columns = run_columns(snapshot, pending_effects=_in_step(outbox), now=now)
            work = child_work(parent_id, effects, set(), columns.status)
            ended = ended_delivery(
                parent_id, start.id, columns.status, snapshot, columns.last_error
            )  # a child done at once tells its parent
            child = NewRun(
                id=self.store.new_child_id(parent_id),
                workflow_name=machine.id,
                workflow_version=machine.fingerprint,
                key=child_key(parent_id, parent_key, start),
                state=columns.state,
                snapshot=machine.persist(snapshot),
                status=columns.status,
                wake_at=columns.wake_at,
                traceparent=traceparent,
                parent_run_id=parent_id,
                parent_invoke_id=start.id,
                system_id=start.system_id or None,
                deliveries=(*work.deliveries, *([ended] if ended is not None else [])),
                search=self.search_values(machine.id, snapshot),
            )
            rows.append((child, outbox))
            rows += self.child_runs(child.id, child.key, work.starts, now, traceparent)
        return rows

    # -- definitions ------------------------------------------------------------------------
    @property
    def machines(self) -> Mapping[str, Machine]:
        """The definition `start` uses, by machine id."""
        return dict(self._latest)

    def machine_for(self, run: RunRecord) -> Machine | None:
        """The definition that can step `run`: its exact version, or one with a migration from
        the version label stored in its snapshot. None if this runtime has neither."""
        exact = self._exact.get((run.workflow_name, run.workflow_version))
        if exact is not None:
            return exact
        label = run.snapshot.get("version")
        legacy = self._legacy.get((run.workflow_name, run.workflow_version))
        if legacy is not None and label == legacy.version:  # pinned before version counted
            return legacy
        return self._by_label.get((run.workflow_name, label)) if isinstance(label, str) else None

    def refuses_event(self, run: RunRecord, event_type: str) -> str | None:
        """Why `run` can never take an event of `event_type` (no state of its machine has a
        transition for it, wildcards included), or None. The one rule the ingress (422) and
        `runs send` refuse by; None also when this runtime lacks the run's definition (a
        worker that has it decides)."""
        machine = self.machine_for(run)
        if machine is None or any(n.candidates(event_type) for n in machine.definition.nodes):
            return None
        return f"no state of {run.workflow_name!r} accepts {event_type!r}"

    def steppable_versions(self) -> set[tuple[str, str]]:
        """(name, version) pairs of active runs this runtime can step (exact or migratable)."""
        pairs = set(self._exact)
        if not self._by_label and not self._legacy:
            return pairs  # no migrations, no older fingerprints: nothing else to look up
        for unknown in self.store.unknown_versions(pairs):
            pair = (unknown.workflow_name, unknown.workflow_version)
            legacy = self._legacy.get(pair)
            if (legacy is not None and unknown.label == legacy.version) or (
                unknown.label is not None
                and (unknown.workflow_name, unknown.label) in self._by_label
            ):
                pairs.add(pair)
        return pairs

    def unknown_versions(self) -> list[VersionCount]:
        """Active runs no definition here can step (reported by workers and the CLI)."""
        steppable = self.steppable_versions()
        return [v for v in self.store.unknown_versions(steppable)]

    # -- the API ----------------------------------------------------------------------------
    def start(
        self,
        name: str,
        input: Any = None,
        key: str | None = None,
        *,
        reuse: KeyReuse = "use_existing",
        traceparent: str | None = None,
        priority: int | None = None,
    ) -> str:
        """Start a run of workflow `name`; return its id.

        With `key`, the key is the run's handle: by default an existing run of `name` with that key
        (active or ended) is returned and nothing new is started; `reuse` chooses otherwise (see
        `KeyReuse`). A key no one could address the run by is refused with `InvalidKeyError`
        (`check_key`: empty, with a `/`, over 512 bytes). Concurrent starts with one key start one
        run. The run joins the trace of the span current here (e.g. the webhook's request), or of
        `traceparent` (a W3C `traceparent` header value) when given: its steps' spans are children
        of this start's span, whichever worker runs them and however late (docs/observability.md).
        `priority` (0-1000, default the workflow's in `priorities=`, else 0): higher is claimed
        first, a run of priority p as if it had been due p minutes earlier, so a long-due run of
        lower priority is never starved.
        """
        try:
            return self.start_run(
                name, input, key, reuse=reuse, traceparent=traceparent, priority=priority
            )[0].id
        except RunPurgedError as exc:  # the key's run, purged since it ended: it is the one
            return exc.run_id

    def attach_executor(self, executor: OwnedCallTaker) -> None:
        """Hand the calls that runs started or sent to here record to `executor` (a `Worker`
        serving in this process attaches its own while it runs): each start and each step of
        `send` leases them to it in its commit and hands them over once committed, as a
        worker's steps hand theirs to its executor, with no claim and no wake-up. While none
        is attached, or the newest is full, their calls stay due for any executor's claim
        (`persistence.local_calls`)."""
        self._local_calls.attach(executor)

    def detach_executor(self, executor: OwnedCallTaker) -> None:
        """Stop handing calls to `executor` (`attach_executor`); the calls already handed
        over are its own to run."""
        self._local_calls.detach(executor)

    def start_many(
        self,
        name: str,
        inputs: Iterable[Any],
        *,
        traceparent: str | None = None,
        priority: int | None = None,
    ) -> builtins.list[str]:
        """Start one run of workflow `name` per input, each as `start(name, input)` makes it
        (without a key), written together: `START_BATCH` runs per transaction, one commit to
        disk each (River's `InsertMany`, Oban's `insert_all`); their ids, in input order.

        Every run's initial transition is taken before anything is written, so an input it
        refuses raises and starts nothing. The batches are written `START_WRITERS` at a time.
        A store failure while writing raises too, once the batches taken before it are
        written (none is taken after it); the runs of the batches written are started (list
        them by workflow and start time).
        A run whose first step starts child runs is written on its own, as `start` writes it.
        The runs join the trace of one start span (or of `traceparent`).
        """
        if priority is not None:
            check_priority(priority, "priority")
        calls = BatchLease(self._local_calls)
        with self.telemetry.starting(name, None, traceparent) as begun:
            now = self.clock.now()
            prepared = [
                self.prepare_run(
                    name,
                    value,
                    None,
                    now,
                    traceparent=begun.traceparent,
                    priority=priority,
                    calls=calls,
                )
                for value in inputs
            ]
            ids = [run.id for run, _, _ in prepared]
            batches = deque(
                prepared[first : first + START_BATCH]
                for first in range(0, len(prepared), START_BATCH)
            )
            del prepared  # (each batch let go of once written: `_write_batches`)
            self._write_batches(batches, now, calls)
        return ids

    def _write_batches(
        self,
        batches: deque[builtins.list[PreparedRun]],
        now: int,
        calls: CallTaker,
    ) -> None:
        """`_write_started` of each of `batches` (taken from it: a batch, some twenty objects
        a run, is let go of once written) by `START_WRITERS` threads, each in the caller's
        context (its start span). Once a batch has failed no thread takes another: the first
        failure is raised once the batches taken before it are written."""
        if len(batches) <= 1:
            while batches:
                self._write_started(batches.popleft(), now, calls)
            return
        failures: builtins.list[BaseException] = []
        taking = threading.Lock()

        def next_batch() -> builtins.list[PreparedRun] | None:
            with taking:
                return batches.popleft() if batches and not failures else None

        def write_until_failure() -> None:
            while (batch := next_batch()) is not None:
                try:
                    self._write_started(batch, now, calls)
                except BaseException as failure:
                    with taking:
                        failures.append(failure)
                    return

        with ThreadPoolExecutor(START_WRITERS, "start-many") as pool:
            for _ in range(START_WRITERS):
                pool.submit(contextvars.copy_context().run, write_until_failure)
        if failures:
            raise failures[0]

    def _write_started(
        self,
        prepared: Sequence[PreparedRun],
        now: int,
        calls: CallTaker,
    ) -> None:
        """Insert runs prepared by `start_many` (one transaction for those without child
        runs), each then `inserted` (its leased calls handed to `calls`) as `begin_run` does."""
        together = []
        for run, outbox, effects in prepared:
            children = self.child_runs(run.id, None, effects, now, run.traceparent)
            if children:
                record, _ = self.store.create_run(run, outbox, now, children=children)
                self.inserted(run, record, outbox, effects, now, calls=calls)
            else:
                together.append((run, outbox, effects))
        if together:
            written = self.store.create_runs([(run, outbox) for run, outbox, _ in together], now)
            for record, (run, outbox, effects) in zip(written, together, strict=True):
                self.inserted(run, record, outbox, effects, now, calls=calls)

    @property
    def local_calls(self) -> CallTaker:
        """The call executors serving in this process (`attach_executor`) as one `CallTaker`:
        `prepare_run(calls=runtime.local_calls)` leases a run's first calls to them, and
        `inserted` hands them over once the run's insert committed."""
        return self._local_calls

    def inserted(
        self,
        run: NewRun,
        record: RunRecord,
        outbox: Sequence[NewEffect],
        effects: Sequence[Effect],
        now: int,
        *,
        calls: CallTaker | None = None,
        snapshot: Snapshot | None = None,
    ) -> None:
        """`run`, prepared here (`prepare_run`), was just inserted as `record`: the calls its
        insert leased to `calls` are handed over, the run is followed while at rest
        (`snapshot`: what its row restores to, if known), counted and its effects logged.
        Every start does this once its insert committed; so must a helper that inserts a
        prepared run its own way (a scheduled start)."""
        if calls is not None and run.call_lease is not None:
            calls.adopt(
                leased_calls(record.id, 1, outbox, run.call_lease),
                record,
                self._latest[record.workflow_name],
            )
        self.resting.started(record, _in_step(outbox), now, snapshot)
        self.telemetry.run_started(record.workflow_name)
        log_effects(effects, record.id)

    def start_run(
        self,
        name: str,
        input: Any = None,
        key: str | None = None,
        *,
        reuse: KeyReuse = "use_existing",
        traceparent: str | None = None,
        priority: int | None = None,
    ) -> tuple[RunRecord, bool]:
        """`start`, returning the run's row and whether this call created it. A key whose
        run was purged within the key window raises `RunPurgedError` (its `run_id` is the
        purged run's; nothing is started)."""
        if priority is not None:
            check_priority(priority, "priority")
        record, created, _, _ = self.begin_run(
            name,
            input,
            key,
            reuse=reuse,
            traceparent=traceparent,
            priority=priority,
            calls=self._local_calls,
        )
        return record, created

    def begin_run(
        self,
        name: str,
        input: Any = None,
        key: str | None = None,
        *,
        reuse: KeyReuse = "use_existing",
        traceparent: str | None = None,
        lease: tuple[str, int] | None = None,
        priority: int | None = None,
        calls: CallTaker | None = None,
    ) -> tuple[RunRecord, bool, builtins.list[NewEffect], Snapshot | None]:
        """`start_run`, also returning the effects the new run's first step recorded and its
        snapshot (what `record.snapshot` restores to; None for a run this call did not create).
        With `lease=(owner, lease_ms)`, a new run that has work due at once is inserted already
        leased to `owner` for `lease_ms` (its claim, in the insert's transaction): the caller
        steps it itself (`persistence.inline`); if the caller dies, the lease runs out and any
        worker takes the run over. `calls`: the executor the run's first calls are leased to
        in the insert (and handed to once it commits), as a step's are (`RunDriver`)."""
        if reuse not in get_args(KeyReuse):
            raise ValueError(f"reuse: {reuse!r} is not one of {', '.join(get_args(KeyReuse))}")
        if key is not None:
            check_key(key)
        with self.telemetry.starting(name, key, traceparent) as begun:
            if key is not None:
                existing = self.find_by_key(name, key)
                if existing is not None and (reuse == "use_existing" or not existing.terminal):
                    if reuse == "reject_active":
                        raise RunActiveError(existing)
                    begun.run(existing.id, False)
                    return existing, False, [], None
            now = self.clock.now()
            run, outbox, effects, snapshot = self._initial_run(
                name, input, key, now, begun.traceparent, priority, lease, calls
            )
            children = self.child_runs(run.id, key, effects, now, run.traceparent)
            record, created = self.store.create_run(
                run, outbox, now, children=children, key_once=reuse == "use_existing"
            )
            begun.run(record.id, created)
        if created:
            self.inserted(run, record, outbox, effects, now, calls=calls, snapshot=snapshot)
        elif reuse == "reject_active":
            raise RunActiveError(record)
        return (record, True, outbox, snapshot) if created else (record, False, [], None)

    def prepare_run(
        self,
        name: str,
        input: Any,
        key: str | None,
        now: int,
        *,
        traceparent: str | None = None,
        priority: int | None = None,
        lease: tuple[str, int] | None = None,
        calls: CallTaker | None = None,
    ) -> PreparedRun:
        """The initial transition of `name` as a row to insert, its outbox records and all its
        effects (for helpers that insert the run their own way, e.g. scheduled starts); the
        run's `priority` defaults to the workflow's. With `lease=(owner, lease_ms)`, a run with
        work due at once is inserted leased to `owner` until `now + lease_ms`; with `calls`, its
        first calls are leased to that executor, if it has room (`begin_run`)."""
        return self._initial_run(name, input, key, now, traceparent, priority, lease, calls)[:3]

    def _initial_run(
        self,
        name: str,
        input: Any,
        key: str | None,
        now: int,
        traceparent: str | None,
        priority: int | None,
        lease: tuple[str, int] | None,
        calls: CallTaker | None = None,
    ) -> tuple[NewRun, builtins.list[NewEffect], tuple[Effect, ...], Snapshot]:
        """`prepare_run` with the initial snapshot too; its first calls leased to `calls`
        (`NewRun.call_lease`), if given and it has room."""
        machine = self._latest.get(name)
        if machine is None:
            known = ", ".join(sorted(self._latest)) or "none"
            raise UnknownWorkflowError(f"no workflow named {name!r} (known: {known})")
        snapshot, effects = machine.initial_transition(input, now)
        outbox = to_outbox(effects)
        columns = run_columns(snapshot, pending_effects=_in_step(outbox), now=now)
        work = child_work(None, effects, set(), columns.status)
        wake_at, owner = columns.wake_at, None
        if lease is not None and wake_at is not None and wake_at <= now:
            owner, wake_at = lease[0], now + lease[1]
        count = leasable_calls(outbox) if calls is not None else 0
        run = NewRun(
            id=new_run_id(),
            workflow_name=name,
            workflow_version=machine.fingerprint,
            key=key,
            state=columns.state,
            snapshot=machine.persist(snapshot),
            status=columns.status,
            wake_at=wake_at,
            traceparent=traceparent,
            lease_owner=owner,
            priority=self.priorities.get(name, 0) if priority is None else priority,
            deliveries=tuple(work.deliveries),
            limit_share=self.load.start_share(name, snapshot.context),
            search=self.search_values(name, snapshot),
            call_lease=calls.lease(count) if calls is not None and count else None,
        )
        return run, outbox, effects, snapshot

    @overload
    def send(
        self,
        target: str | EventLike,
        event: EventLike | None = None,
        *,
        workflow: str | None = None,
        key: str | None = None,
        traceparent: str | None = None,
        wait: None = None,
    ) -> int: ...

    @overload
    def send(
        self,
        target: str | EventLike,
        event: EventLike | None = None,
        *,
        workflow: str | None = None,
        key: str | None = None,
        traceparent: str | None = None,
        wait: float,
    ) -> Answer: ...

    def send(
        self,
        target: str | EventLike,
        event: EventLike | None = None,
        *,
        workflow: str | None = None,
        key: str | None = None,
        traceparent: str | None = None,
        wait: float | None = None,
    ) -> int | Answer:
        """Send an event to a run; return its inbox id (with `wait`, an `Answer`).

        When the run is at rest (active, no worker holding it, nothing queued before this
        event, no effects waiting to run), the event is applied here, in the transaction that
        records it: the run's new state is committed when `send` returns (the step a worker
        would take, with the same records, counted and traced as a worker's step; effects it
        records are left to the workers, woken to claim the run). Otherwise, and whenever that
        step would fail the run, the event is queued and a worker applies it, in order
        (`Runtime(step_in_send=False)`: always).

        `send(run_id, event)` addresses the run by id; `send(event, workflow=..., key=...)` by
        its key (the newest run of `workflow` started with `key`). The event is "TYPE" or
        {"type": ...}. Raises `RunNotFoundError` for an unknown run or key and
        `RunFinishedError` if the run has ended. The send's span (in the trace current here,
        or of `traceparent`) is stored with the event; the step that applies it links to it.

        With `wait=SECONDS`, the send returns once the step that applied this event has
        committed (here, or a worker's step later), with an `Answer` (`persistence.waiting`):
        `status="applied"`, the `step` (run version) that applied it, the `state` right after
        it and the run as read then; `"queued"` with the run as it is if the time ran out
        first; `"dead"` if the run ended before applying it.
        """
        if workflow is not None or key is not None:
            if workflow is None or key is None or event is not None:
                raise TypeError("send by key takes the event and both workflow= and key=")
            run_id, event = self.get_by_key(workflow, key).id, target
        elif event is None or not isinstance(target, str):
            raise TypeError("send takes (run_id, event) or (event, workflow=..., key=...)")
        else:
            run_id = target
        if wait is not None:
            check_timeout(wait)
        frozen = normalize_event(event)
        with self.telemetry.sending(run_id, str(frozen["type"]), traceparent) as stored:
            if not self.step_in_send:
                inbox_id = self.store.send_event(
                    run_id, thaw(frozen), self.clock.now(), traceparent=stored
                )
            else:
                sender = self._sender()
                sender.sent_step = None
                inbox_id = sender.send(run_id, thaw(frozen), self.clock.now(), stored)
                if wait is not None and sender.sent_step is not None:  # applied in the send
                    _, step, state = sender.sent_step
                    return Answer(
                        run_id, inbox_id, "applied", self.store.get_run(run_id), step, state
                    )
        if wait is None:
            return inbox_id
        return self.wait_for_event(run_id, inbox_id, wait)

    def wait_for_event(self, run_id: str, inbox_id: int, timeout: float) -> Answer:
        """Wait up to `timeout` seconds for the event sent to `run_id` as inbox row `inbox_id`
        (what `send` and `deliver` return) to be applied; its `Answer` (see `send`)."""
        return wait_applied(self.store, run_id, inbox_id, timeout)

    def wait(self, run_id: str, timeout: float = 30.0) -> Ended:
        """Wait up to `timeout` seconds for the run to end (Temporal's `result()`, DBOS's
        `get_result`): its `Ended` status, output and error. Raises `StillRunningError` (a
        `TimeoutError`, with the run) if it is still active then, and `RunNotFoundError` for
        an unknown run. Without polling on PostgreSQL (`persistence.waiting`)."""
        return wait_ended(self.store, run_id, timeout)

    def deliver(
        self, run_id: str, event: EventLike, delivery_id: str, *, traceparent: str | None = None
    ) -> tuple[int, bool]:
        """Queue `event` for the run once per `delivery_id` (a webhook's delivery id, e.g.
        Standard Webhooks' `webhook-id`): the delivery is recorded with the queued event, in
        its transaction, so the same delivery posted again queues nothing. Returns the inbox
        id and True, or the first delivery's inbox id and False. The event is always queued
        for a worker (never applied in the call, as `send` may). Errors as `send`."""
        frozen = normalize_event(event)
        with self.telemetry.sending(run_id, str(frozen["type"]), traceparent) as stored:
            return self.store.send_delivery(
                run_id, thaw(frozen), self.clock.now(), delivery_id, traceparent=stored
            )

    def _sender(self) -> RunDriver:
        """This thread's driver for the steps `send` takes (it never holds a lease)."""
        driver: RunDriver | None = getattr(self._senders, "driver", None)
        if driver is None:
            driver = RunDriver(
                self,
                f"{self._sender_id}/send-{threading.get_ident()}",
                30_000,
                calls=self._local_calls,
            )
            self._senders.driver = driver
        return driver

    def get(self, run_id: str) -> RunRecord:
        """The run's row (state, status, snapshot, `parent_run_id` and `parent_invoke_id` of a
        child run, ...). `RunNotFoundError` if unknown."""
        return self.store.get_run(run_id)

    def children(self, run_id: str, limit: int = 100) -> builtins.list[RunRecord]:
        """The child runs `run_id` started (its invokes and `spawn_child`), newest first."""
        return self.store.search_runs(RunQuery(parent_run_id=run_id), limit=limit)

    def find_by_key(self, workflow: str, key: str) -> RunRecord | None:
        """The newest run of `workflow` started with `key` (any status), or None."""
        found = self.store.search_runs(RunQuery(workflow_name=workflow, key=key), limit=1)
        return found[0] if found else None

    def get_by_key(self, workflow: str, key: str) -> RunRecord:
        """The newest run of `workflow` started with `key` (any status); `RunNotFoundError` if
        there is none."""
        found = self.find_by_key(workflow, key)
        if found is None:
            tomb = self.store.tombstone(workflow, key, self.clock.now())
            if tomb is not None:
                raise RunNotFoundError(
                    f"the run of {workflow!r} with key {key!r} "
                    f"({tomb.run_id}) has ended and was purged"
                )
            raise RunNotFoundError(f"no run of {workflow!r} with key {key!r}")
        return found

    def snapshot(self, run_id: str) -> Snapshot:
        """The run's snapshot restored with its definition (for `.matches`, `.context`, ...)."""
        return self.restore(self.store.get_run(run_id))

    def restore(self, run: RunRecord) -> Snapshot:
        """`run`'s stored snapshot restored with its definition; `LookupError` if this runtime
        has no definition or migration for its version."""
        machine = self.machine_for(run)
        if machine is None:
            raise LookupError(
                f"run {run.id} is {run.workflow_name} version {run.workflow_version}, which this "
                "runtime has no definition or migration for"
            )
        return machine.restore(run.snapshot)

    def list(
        self,
        status: str | None = None,
        name: str | None = None,
        limit: int = 100,
        offset: int = 0,
        *,
        key: str | None = None,
        search: Mapping[str, Any] | None = None,
    ) -> builtins.list[RunRecord]:
        """Runs newest first, optionally filtered by status, workflow name, start key and
        search attributes (`search={"customer": 42}`: every one must hold; values as the
        context holds them, compared as they are indexed, `persistence.search`)."""
        if key is None and not search:
            return self.store.list_runs(
                status=status, workflow_name=name, limit=limit, offset=offset
            )
        query = RunQuery(
            workflow_name=name, status=status, key=key, search=search_terms(search or {})
        )
        return self.store.search_runs(query, limit=limit, offset=offset)

    def cancel(self, run_id: str, reason: str | None = None) -> str:
        """Cancel the run: "cancelled" (done), "requested" (the worker holding it will cancel it
        at its next step) or "finished" (it had already ended). Its active child runs are
        cancelled with it, recursively. Each run cancelled here, the run and its descendants,
        is counted in the runs-finished metric (a requested one by the step that cancels it)."""
        cancelled: builtins.list[str] = []
        outcome = self.store.cancel_run(
            run_id,
            self.clock.now(),
            None if reason is None else storable_text(reason),
            cancelled=cancelled,
        )
        self.resting.drop(run_id)
        self.telemetry.runs_cancelled(cancelled)
        return outcome

    def resume(self, run_id: str) -> RunRecord:
        """Resume a failed run from the state it failed in (like DBOS's `resume_workflow`):
        the run is active again and due now, the failed effects of its last failing step run
        again (with their idempotency keys), and the resume is journaled. Raises
        `NotResumableError` unless the run's status is `error` and its snapshot restores with
        a definition this runtime has."""
        run = self.store.get_run(run_id)
        if run.status != "error":
            raise NotResumableError(f"run {run_id} is {run.status}; only failed runs resume")
        machine = self.machine_for(run)
        if run.problem is not None:
            raise NotResumableError(f"run {run_id}: {run.problem}")
        if machine is None:
            raise NotResumableError(
                f"run {run_id}: no definition or migration here for version {run.workflow_version}"
            )
        data = run.snapshot
        if data.get("status") == "error":  # the machine itself failed: back to where it was
            data = {**data, "status": "active", "error": None}
        try:
            snapshot = machine.restore(data)
        except Exception as exc:
            raise NotResumableError(f"run {run_id}: snapshot does not restore: {exc}") from exc
        withdraw = self._parent_waits(run)
        try:
            return self.store.resume_run(
                run_id,
                run.version,
                machine.persist(snapshot),
                state_text(snapshot),
                self.clock.now(),
                withdraw=withdraw,
            )
        except ConflictError as exc:
            raise NotResumableError(str(exc)) from exc

    def _parent_waits(self, run: RunRecord) -> tuple[str, str] | None:
        """For a failed child run: (its parent, the queued event that reported its failure),
        which its resume takes back, so that the parent gets one result, the resumed run's.
        `NotResumableError` naming the parent when it no longer waits for this child: it has
        ended, left the invoking state (or stopped the child), or applied the failure."""
        parent_id, invoke = run.parent_run_id, run.parent_invoke_id
        if parent_id is None:
            return None
        refused = f"run {run.id} is a child run of {parent_id}, which "
        if invoke is None:
            raise NotResumableError(refused + "stopped it; its result would reach no one")
        parent = self.store.get_run(parent_id)
        if parent.status != "active":
            raise NotResumableError(refused + f"has ended ({parent.status}); start a new run")
        child = parent.snapshot.get("children", {}).get(invoke)
        state = child.get("state") if isinstance(child, Mapping) else None
        if child is None or (isinstance(state, Mapping) and state.get(FINISHED)):
            raise NotResumableError(
                refused + f"already took its result or left the state "
                f"invoking {invoke!r}; resuming would report a second one"
            )
        return parent_id, error_actor_event_type(invoke)

    # -- the run lifecycle (persistence/lifecycle.py) -----------------------------------------
    def purge(
        self,
        ended_before: Duration,
        *,
        workflow: str | None = None,
        dry_run: bool = False,
        key_window: Duration | None = None,
    ) -> PurgeReport:
        """Delete the runs that ended more than `ended_before` ago (a `timedelta`, ms, or
        text like "30d"), of `workflow` only if given, with everything stored for them, in
        bounded batches of short transactions; never a run with a live parent or child. Each
        purged top-level run's key keeps answering `start` (with the purged run's id) for
        `key_window` (default: the runtime's). `dry_run`: count them, delete nothing."""
        now = self.clock.now()
        window = (
            self.retention.key_window_ms
            if key_window is None
            else duration_ms(key_window, "key_window")
        )
        return purge(
            self.store,
            now - duration_ms(ended_before, "ended_before"),
            now,
            workflow=workflow,
            key_window_ms=window,
            dry_run=dry_run,
        )

    def apply_retention(self) -> int:
        """One bounded pass of the per-workflow retention (`retention=`): up to 5,000 of each
        workflow's runs past its period (`MAX_PASS_RUNS`, in batches of short transactions),
        and the expired key tombstones; the runs purged. Workers call it at every report
        interval."""
        if not self.retention.periods:
            return 0
        return self.retention.apply(self.store, self.clock.now())

    def fork(self, run_id: str, step: int) -> RunRecord:
        """A new run of the same workflow from run `run_id`'s snapshot after journal step
        `step` (like DBOS's `fork_workflow`), linked to it (`forked_from`): its calls in
        flight at that step are started afresh and every later effect is recorded with the
        new run's idempotency keys; the original is untouched. `NotRestorableError` when
        the step has no snapshot, no registered definition restores it, or it waits for a
        child run."""
        return fork_run(self, self.store.get_run(run_id), step)

    def reset(self, run_id: str, step: int) -> RunRecord:
        """Put failed run `run_id` back, in place, to its snapshot after journal step `step`
        (like Temporal's `workflow reset`): it is active again from there, its journal is
        kept and the reset journaled, its open calls are stopped and those in flight at that
        step started afresh with new keys. `NotRestorableError` as `fork`, or unless the
        run has failed."""
        return reset_run(self, self.store.get_run(run_id), step)

    def forked_from(self, run_id: str) -> Fork | None:
        """Where run `run_id` was forked from (run and step), if it is a fork."""
        return self.store.fork_of(run_id)

    def dead_letters(self, run_id: str) -> builtins.list[DeadLetter]:
        """Events queued for the run that can no longer be applied, with the reason."""
        return self.store.dead_letters(run_id)

    def stuck(self, older_than_ms: int = 3_600_000, limit: int = 100) -> builtins.list[RunRecord]:
        """Active runs whose row nobody touched for `older_than_ms` (default one hour) and that
        wait for no timer due within that time (asleep until a later timer is not stuck)."""
        return self.store.stuck_runs(self.clock.now(), older_than_ms, limit)

    def on(self, event_type: str, fn: Callable[[Mapping[str, Any]], None]) -> None:
        """Call `fn(event)` when a run emits `event_type` ("*" for all), after the step that
        emitted it commits (at least once: a crash may repeat it)."""
        self.listeners.setdefault(event_type, []).append(fn)


def machines_from(objects: Iterable[Any]) -> list[Machine]:
    """The `Machine` objects among `objects` (e.g. a module's globals), in order."""
    return [o for o in objects if isinstance(o, Machine)]


def _in_step(outbox: Sequence[NewEffect]) -> bool:
    """Whether a run's first step leaves effects for the run itself to execute (not calls)."""
    return any(not is_call(e) for e in outbox)
