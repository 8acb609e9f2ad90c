"""The store contract: the `Store` protocol every backend implements, split by concern.

A store keeps one row per workflow run plus its outbox (`workflow_effects`), its inbox of events
sent from outside (`workflow_inbox`), an optional journal (`workflow_events`) and small shared
tables used by helpers (circuit breakers, "one run at a time" claims, schedules). The values it
takes and returns are in `persistence.stores.records`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from persistence.stores.clocks import StoreClock
from persistence.stores.planners import PlanT, Sent, StepPlanner
from persistence.stores.records import (
    BreakerRecord,
    CallAttempt,
    CallEnd,
    CallFinish,
    CallRecord,
    ClaimRecord,
    DeadLetter,
    EffectOutcome,
    EffectRecord,
    EventProgress,
    EventRecord,
    Fork,
    Grant,
    InboxEvent,
    JSONDict,
    LimitUsage,
    NewEffect,
    NewRun,
    PendingWork,
    PurgedRun,
    ReencryptReport,
    RunQuery,
    RunRecord,
    ScheduleRecord,
    StepCommit,
    Tombstone,
    VersionCount,
)
from persistence.stores.rules import PURGE_BATCH
from persistence.wakeup import Wakeup


@runtime_checkable
class RunStore(Protocol):
    """Runs and steps: what the runtime and its workers write and read to move runs on."""

    def create_run(
        self,
        run: NewRun,
        effects: Sequence[NewEffect],
        now: int,
        *,
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

    def create_runs(
        self, runs: Sequence[tuple[NewRun, Sequence[NewEffect]]], now: int
    ) -> list[RunRecord]:
        """Insert runs without keys or child runs, each as `create_run` inserts it, in one
        transaction (one commit to disk): all of them or none. `ValueError` for a run with a
        key or a parent (a key's start decides against the runs that hold it, one by one)."""
        ...

    def get_run(self, run_id: str) -> RunRecord:
        """The run with this id, or `RunNotFoundError`."""
        ...

    def get_runs(self, run_ids: Collection[str]) -> dict[str, RunRecord]:
        """The runs with these ids, by id, in as few reads as the store can (an id no run
        has is left out)."""
        ...

    def find_run(self, workflow_name: str, key: str) -> RunRecord | None:
        """The active run of `workflow_name` with idempotency key `key`, if any."""
        ...

    def cancel_run(
        self,
        run_id: str,
        now: int,
        reason: str | None = None,
        *,
        cancelled: list[str] | None = None,
    ) -> str:
        """Cancel a run: `"cancelled"` if done now, `"requested"` if a worker holds its lease (a
        cancel event is queued for it), `"finished"` if the run had already ended. Its active
        child runs are cancelled with it, recursively. `cancelled` (see `commit_steps`) gets
        the run's workflow name too when this call cancelled it."""
        ...

    def send_event(
        self, run_id: str, event: Mapping[str, Any], now: int, *, traceparent: str | None = None
    ) -> int:
        """Queue an event for an active run (with the sender's `traceparent`); return its
        inbox id. `RunFinishedError` if the run has ended, `RunNotFoundError` if it does not
        exist."""
        ...

    def send_delivery(
        self,
        run_id: str,
        event: Mapping[str, Any],
        now: int,
        delivery_id: str,
        *,
        traceparent: str | None = None,
    ) -> tuple[int, bool]:
        """`send_event` at most once per run and `delivery_id` (a webhook's delivery id): the
        delivery is recorded durably with the queued event, in its transaction. Returns the
        inbox id and True, or, for a delivery already recorded, the inbox id its event got and
        False (nothing queued, whatever the run's status now)."""
        ...

    def pending_events(self, run_id: str) -> list[InboxEvent]:
        """Events queued for the run, oldest first."""
        ...

    def send_and_step(
        self,
        run_id: str,
        event: Mapping[str, Any],
        now: int,
        planner: StepPlanner[PlanT],
        *,
        traceparent: str | None = None,
        cancelled: list[str] | None = None,
        rest: RunRecord | None = None,
        finish: CallFinish | None = None,
    ) -> Sent[PlanT]:
        """`send_event` with the step that applies the event folded into its transaction:
        the run's row is locked, the event queued, and `planner` (pure: `stores.planners`) is
        handed the run with its pending work (the event last in its inbox); the commit of the
        plan it returns, if any, is written in the same transaction exactly as `commit_steps`
        writes it (consuming the event), else the event stays queued and idle workers are
        woken for it. Returns the inbox id, the run's new version (None when the event was
        left queued) and the plan written (`Sent`). `RunFinishedError`/`RunNotFoundError` as
        `send_event` (nothing written); an exception from writing the step rolls back the
        whole transaction (nothing queued either).

        `rest` is the run's row as the caller last committed it, at rest (`persistence.resting`):
        a store may first hand `planner` that run with only the event as its pending work, and
        write the unleased commit it plans (without child runs or deliveries) only if the run
        is still exactly so: at `rest.version` with its snapshot and definition, active, held
        by nobody, no event queued and no effect pending (PostgreSQL: one round trip, the event
        recorded as applied, its inbox id drawn but no row left). If it is not, nothing of that
        step is written and the call goes on as without `rest` (`planner` is asked again, with
        the run as locked now).

        With `finish`, the event is the result of that call (`persistence.calls`): its end is
        recorded first, under the run's lock, and the event queued (with the call's key) only
        if `finish.owner` still holds the call at `finish.attempt`: else nothing is queued or
        stepped and `Sent(0)` is returned (the call was stopped, or taken over)."""
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

    def claim_work(
        self,
        owner: str,
        now: int,
        lease_ms: int,
        limit: int,
        versions: Collection[tuple[str, str]] | None = None,
    ) -> list[tuple[RunRecord, PendingWork]]:
        """`claim_runs` with each claimed run's `pending_work`, read after the lease is set (in
        the same round trip where the database allows); what a worker does. Unlike
        `claim_runs`, a claimed row that does not parse is returned leased, with its `problem`
        set, for the worker to fail (`fail_run`) with its telemetry: the failure's log line,
        the run's error workflow, the children it cancels counted."""
        ...

    def heartbeat(self, owner: str, run_ids: Collection[str], now: int, lease_ms: int) -> set[str]:
        """Extend the leases `owner` still holds among `run_ids`; return those ids."""
        ...

    def release(
        self,
        run_id: str,
        owner: str,
        wake_at: int | None,
        *,
        attempt_count: int | None = None,
        last_error: str | None = None,
    ) -> bool:
        """Give up a lease without stepping; `wake_at` is when the run next needs a worker
        (a transient failure: its backoff, with the attempt and error shown on the row).
        False if `owner` no longer held it."""
        ...

    def fail_run(
        self,
        run_id: str,
        owner: str,
        reason: str,
        now: int,
        *,
        outcomes: Sequence[EffectOutcome] = (),
        start_runs: Sequence[tuple[NewRun, Sequence[NewEffect]]] = (),
        attempt_count: int | None = None,
        cancelled: list[str] | None = None,
        error_traceback: str | None = None,
    ) -> bool:
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

    def resume_run(
        self,
        run_id: str,
        expected_version: int,
        snapshot: JSONDict,
        state: str,
        now: int,
        *,
        withdraw: tuple[str, str] | None = None,
    ) -> RunRecord:
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

    def commit_steps(
        self, commits: Sequence[StepCommit], now: int, *, cancelled: list[str] | None = None
    ) -> list[int | None]:
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

    def new_child_id(self, parent_run_id: str) -> str:
        """A new run id for a child run of `parent_run_id` (a store may pick one that puts
        the child beside its parent: Citus puts a run tree on one shard)."""
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

    def match_ids(self, query: RunQuery, after: str | None = None, limit: int = 500) -> list[str]:
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

    def skip_schedule(
        self,
        name: str,
        expected_version: int,
        decided_to: int,
        now: int,
        *,
        buffered_at: int | None,
        skipped: Sequence[Mapping[str, Any]],
    ) -> bool:
        """Advance schedule `name` to `decided_to` without starting a run: its slots up to
        there were skipped (`skipped`, appended to its skips) or buffered (`buffered_at`).
        False (and nothing written) if the schedule is no longer at `expected_version`."""
        ...


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

    def acquire_capacity(
        self,
        name: str,
        holder: str,
        run_id: str,
        owner: str,
        now: int,
        *,
        max_in_flight: int | None,
        calls: int | None,
        per_ms: int,
        recheck_ms: int,
        lease_ms: int,
        call: str | None = None,
    ) -> Grant:
        """Take a place in limit `name` for `holder` (a call's key, or `run:<id>`) of `run_id`,
        leased by `owner`: granted (a slot held, a call counted in the rate window), or not
        (the holder is queued for a slot in arrival order and the run released, `waiting_for`
        set and its wake-up time `retry_at`). With `call` (the key of the run's call that asks,
        leased to `owner`, a call executor), a refusal releases that call instead of the run:
        pending again, due at `retry_at` or when a freed slot wakes it, `waiting_for` on its
        row; its run goes on meanwhile."""
        ...

    def release_capacity(
        self,
        name: str,
        holders: Collection[str],
        now: int,
        *,
        max_in_flight: int | None,
        lease_ms: int,
    ) -> None:
        """Give back `holders`' slots of `name` and reserve the freed ones (with no holders:
        those of holders whose lease expired) for the first holders in the queue for
        `lease_ms`, each woken (a call made due, a run) to be claimed before anything else."""
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

    def claim_calls(
        self, owner: str, now: int, lease_ms: int, limit: int, run_id: str | None = None
    ) -> list[CallRecord]:
        """Lease up to `limit` due calls (of `run_id` only, if given; or calls whose holder
        stopped renewing its lease), each claim opening the call's next attempt; a call is
        not due while an effect its run recorded at or before its step is pending."""
        ...

    def heartbeat_calls(
        self, owner: str, beats: Mapping[str, Any], now: int, lease_ms: int
    ) -> set[str]:
        """Renew `owner`'s call leases (with heartbeat details); the keys it still holds."""
        ...

    def retry_call(
        self, key: str, owner: str, attempt: int, now: int, at: int, end: CallEnd
    ) -> bool:
        """Give a call back to be attempted again at `at`; False when `owner` lost it."""
        ...

    def note_call_failures(self, key: str, attempt: int, end: CallEnd) -> None:
        """Show on a call's run that the call failed transiently `attempt` times."""
        ...

    def finish_calls(
        self,
        ends: Sequence[tuple[CallFinish, str, Mapping[str, Any]]],
        now: int,
        planner: StepPlanner[PlanT],
        cancelled: list[str] | None = None,
        rests: Mapping[str, RunRecord] | None = None,
    ) -> list[Sent[PlanT]]:
        """`send_and_step` with its `finish` for each (call end, run id, result event) of a
        burst of ends, all in one transaction (at most one end per run): per end, what its send
        did (version None: queued for a worker; `Sent(0)`: dropped, its holder no longer held
        the call). `rests`: runs as this process last committed or read them, by id
        (`send_and_step`'s `rest`: only a guess, checked as that is)."""
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


@runtime_checkable
class Lifecycle(Protocol):
    """The run lifecycle around the steps: retention (purge ended runs, keep their keys for a
    while), and fork and reset from a journal step's snapshot (`stores/lifecycle.py`)."""

    def purge_runs(
        self,
        ended_before: int,
        now: int,
        *,
        workflow: str | None = None,
        limit: int = PURGE_BATCH,
        keep_keys_until: int | None = None,
        dry_run: bool = False,
    ) -> list[PurgedRun]:
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

    def fork_run(
        self, run: NewRun, source: str, step: int, effects: Sequence[NewEffect], now: int
    ) -> RunRecord:
        """Insert `run` (version 1, from the snapshot after step `step` of run `source`) with
        `effects` (its calls in flight, recorded afresh), linked to `source` (`Fork`), its
        first journal row the fork, in one transaction."""
        ...

    def reset_run(
        self,
        run_id: str,
        expected_version: int,
        snapshot: JSONDict,
        state: str,
        wake_at: int | None,
        step: int,
        effects: Sequence[NewEffect],
        now: int,
        *,
        search: Sequence[tuple[str, str]] = (),
    ) -> RunRecord:
        """Make the failed run active again from `snapshot` (after its journal step `step`):
        its open calls are stopped and its pending effects skipped, `effects` (the calls in
        flight at that step) recorded afresh at the new version, its search attributes set to
        `search` (those of `snapshot`), and the reset journaled. `RunFinishedError` unless the
        run is `error` at `expected_version`."""
        ...

    def fork_of(self, run_id: str) -> Fork | None:
        """Where run `run_id` was forked from, if it is a fork."""
        ...

    def call_starts(
        self, run_id: str, call_ids: Collection[str], step: int
    ) -> dict[str, tuple[str, JSONDict]]:
        """For each of `call_ids` the run started by step `step`: (outbox kind, the payload
        of its newest start), from its calls or, for a limited call site, its effects."""
        ...


class Store(RunStore, RunQueries, Coordination, Capacity, Calls, Lifecycle, Payloads, Protocol):
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
