"""In-memory store for unit tests: the same contract as the SQL stores, nothing durable.

Records are kept as immutable dataclasses and replaced on write, under one lock, so every method
is atomic exactly like a transaction in the SQL stores.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import fields, is_dataclass, replace
from typing import Any, TypeVar

import orjson

from persistence import schema
from persistence.stores.base import (
    ACTIVE,
    FAILED_EVENT,
    RESUME_EVENT,
    BreakerRecord,
    ClaimRecord,
    ConflictError,
    DeadLetter,
    EffectOutcome,
    EffectRecord,
    EventRecord,
    InboxEvent,
    NewEffect,
    NewRun,
    PendingWork,
    RunFinishedError,
    RunNotFoundError,
    RunQuery,
    RunRecord,
    ScheduleRecord,
    StepCommit,
    VersionCount,
    cancel_event,
    check_distinct_runs,
    check_group_column,
    check_last,
    check_status,
    completion_times,
    ended_reason,
    idempotency_key,
    only_version,
)

T = TypeVar("T")
_JSON_FIELDS = frozenset({"snapshot", "payload", "result", "event", "data"})


def _newest(rows: list[T], last: int | None) -> list[T]:
    return rows if last is None else rows[max(len(rows) - last, 0):]


def _copy(value: T) -> T:
    """A detached copy: JSON values are copied through JSON (as a database would), records
    get copies of their JSON fields, lists are copied item by item."""
    if isinstance(value, list):
        return [_copy(item) for item in value]  # type: ignore[return-value]
    if is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _copy_json(getattr(value, f.name)) for f in fields(value)
                   if f.name in _JSON_FIELDS}  # fmt: skip
        return replace(value, **changes)
    return _copy_json(value)  # type: ignore[no-any-return]


def _copy_json(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


class MemoryStore:
    """A store living in this process only (tests and demos)."""

    dialect = "sqlite"  # shares the migration count of the SQL stores for `schema_version`
    url = "memory://"

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._version = 0
        self._runs: dict[str, RunRecord] = {}
        self._effects: dict[str, EffectRecord] = {}
        self._inbox: dict[int, InboxEvent] = {}
        self._dead: dict[int, DeadLetter] = {}
        self._events: list[EventRecord] = []
        self._claims: dict[str, ClaimRecord] = {}
        self._breakers: dict[str, BreakerRecord] = {}
        self._schedules: dict[str, ScheduleRecord] = {}
        self._next_id = 1

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    # -- schema -----------------------------------------------------------------------------
    def migrate(self) -> list[int]:
        """Mark the schema current (there is nothing to create)."""
        with self._lock:
            todo = [m.version for m in schema.pending(self.dialect, self._version)]
            self._version = schema.latest_version(self.dialect)
            return todo

    def schema_version(self) -> int:
        """0 until `migrate()` ran, then the latest version."""
        return self._version

    def check_schema(self) -> None:
        """Same check as the SQL stores."""
        schema.check_current(self.dialect, self._version, self.url)

    def close(self) -> None:
        """Nothing to release."""

    # -- runs -------------------------------------------------------------------------------
    def create_run(
        self, run: NewRun, effects: Sequence[NewEffect], now: int
    ) -> tuple[RunRecord, bool]:
        """Insert, or return the active run with the same key."""
        check_status(run.status)
        with self._lock:
            if run.key is not None:
                existing = self.find_run(run.workflow_name, run.key)
                if existing is not None:
                    return existing, False
            if run.id in self._runs:
                raise ValueError(f"duplicate run id {run.id}")
            completed_at, failed_at = completion_times(run.status, now)
            record = RunRecord(
                run.id, run.workflow_name, run.workflow_version, run.key, run.state,
                _copy(run.snapshot), run.status, run.attempt_count, now, now, completed_at,
                failed_at, run.last_error, run.wake_at, None, None, 1,
                traceparent=run.traceparent,
            )  # fmt: skip
            self._runs[run.id] = record
            self._add_effects(run.id, 1, effects, now)
            return _copy(record), True

    def _add_effects(self, run_id: str, step: int, effects: Sequence[NewEffect], now: int) -> None:
        for e in effects:
            key = idempotency_key(run_id, step, e.index)
            if key in self._effects:
                raise ConflictError(f"effect {key} already recorded")
            self._effects[key] = EffectRecord(
                key,
                run_id,
                step,
                e.index,
                e.kind,
                _copy(e.payload),
                "pending",
                None,
                None,
                now,
                now,
            )

    def get_run(self, run_id: str) -> RunRecord:
        """The run with this id."""
        with self._lock:
            if run_id not in self._runs:
                raise RunNotFoundError(f"no run with id {run_id!r}")
            return _copy(self._runs[run_id])

    def find_run(self, workflow_name: str, key: str) -> RunRecord | None:
        """The active run with this key."""
        with self._lock:
            for r in self._runs.values():
                if r.workflow_name == workflow_name and r.key == key and r.status == ACTIVE:
                    return _copy(r)
            return None

    def list_runs(
        self,
        status: str | None = None,
        workflow_name: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[RunRecord]:
        """Runs newest first."""
        with self._lock:
            runs = [
                r
                for r in self._runs.values()
                if (status is None or r.status == status)
                and (workflow_name is None or r.workflow_name == workflow_name)
            ]
            runs.sort(key=lambda r: (-r.created_at, r.id))
            return _copy(runs[offset : offset + limit])

    def count_runs(self) -> dict[str, int]:
        """Runs per status."""
        with self._lock:
            counts: dict[str, int] = {}
            for r in self._runs.values():
                counts[r.status] = counts.get(r.status, 0) + 1
            return counts

    def search_runs(self, query: RunQuery, limit: int = 50, offset: int = 0) -> list[RunRecord]:
        """Runs matching `query`, newest first."""
        with self._lock:
            runs = [r for r in self._runs.values() if query.matches(r)]
            runs.sort(key=lambda r: (-r.created_at, r.id))
            return _copy(runs[offset : offset + limit])

    def count_matching(self, query: RunQuery) -> dict[str, int]:
        """Runs matching `query`, per status."""
        with self._lock:
            counts: dict[str, int] = {}
            for r in self._runs.values():
                if query.matches(r):
                    counts[r.status] = counts.get(r.status, 0) + 1
            return counts

    def run_groups(
        self, column: str, workflow_name: str | None = None
    ) -> list[tuple[str, str, int]]:
        """(value, status, runs) per group of runs."""
        check_group_column(column)
        counts: dict[tuple[str, str], int] = {}
        with self._lock:
            for r in self._runs.values():
                if workflow_name is None or r.workflow_name == workflow_name:
                    group = (str(getattr(r, column)), r.status)
                    counts[group] = counts.get(group, 0) + 1
        return [(value, status, n) for (value, status), n in sorted(counts.items())]

    def cancel_run(self, run_id: str, now: int, reason: str | None = None) -> str:
        """Cancel now, or ask the lease holder."""
        with self._lock:
            run = self.get_run(run_id)
            if run.status != ACTIVE:
                return "finished"
            if run.lease_owner is not None and (run.lease_expires_at or 0) > now:
                self._queue(run_id, cancel_event(reason), now)
                return "requested"
            self._runs[run_id] = replace(
                run, status="cancelled", completed_at=now, updated_at=now,
                last_error=reason if reason is not None else run.last_error, wake_at=None,
                lease_owner=None, lease_expires_at=None, version=run.version + 1,
            )  # fmt: skip
            for key, e in list(self._effects.items()):
                if e.run_id == run_id and e.status == "pending":
                    self._effects[key] = replace(e, status="skipped", result="cancelled",
                                                 updated_at=now)  # fmt: skip
            self._dead_letter(run_id, "cancelled", now)
            self._events.append(EventRecord(self._new_id(), run_id, run.version + 1,
                                            cancel_event(reason), run.state, run.state, now))
            return "cancelled"

    def _dead_letter(self, run_id: str, status: str, now: int) -> None:
        for i in [i for i, ev in self._inbox.items() if ev.run_id == run_id]:
            ev = self._inbox.pop(i)
            self._dead[i] = DeadLetter(i, run_id, ev.event, ev.created_at, now,
                                       ended_reason(status))

    def dead_letters(self, run_id: str) -> list[DeadLetter]:
        """Events of the run that can no longer be applied, oldest first."""
        with self._lock:
            return _copy(sorted((d for d in self._dead.values() if d.run_id == run_id),
                                key=lambda d: d.id))  # fmt: skip

    def sweep_dead_letters(self, now: int) -> list[DeadLetter]:
        """Live events of ended runs become dead letters."""
        with self._lock:
            ended = {ev.run_id for ev in self._inbox.values()
                     if self._runs[ev.run_id].status != ACTIVE}  # fmt: skip
            before = set(self._dead)
            for run_id in ended:
                self._dead_letter(run_id, self._runs[run_id].status, now)
            return [self._dead[i] for i in sorted(set(self._dead) - before)]

    def fail_run(self, run_id: str, owner: str, reason: str, now: int, *,
                 outcomes: Sequence[EffectOutcome] = (),
                 start_runs: Sequence[tuple[NewRun, Sequence[NewEffect]]] = ()) -> bool:
        """End a leased run as `error` without rewriting its snapshot."""
        with self._lock:
            r = self._runs.get(run_id)
            if r is None or r.lease_owner != owner:
                return False
            self._runs[run_id] = replace(
                r, status="error", last_error=reason, updated_at=now, completed_at=now,
                failed_at=now, wake_at=None, lease_owner=None, lease_expires_at=None,
                version=r.version + 1)  # fmt: skip
            for o in outcomes:
                e = self._effects.get(o.idempotency_key)
                if e is not None and e.run_id == run_id and e.status == "pending":
                    self._effects[o.idempotency_key] = replace(e, status=o.status, result=None,
                                                               error=o.error, updated_at=now)
            self._dead_letter(run_id, "error", now)
            self._events.append(EventRecord(self._new_id(), run_id, r.version + 1,
                                            {"type": FAILED_EVENT, "reason": reason}, r.state,
                                            r.state, now))  # fmt: skip
            for run, run_effects in start_runs:
                self.create_run(run, run_effects, now)
            return True

    def resume_run(self, run_id: str, expected_version: int, snapshot: Mapping[str, Any],
                   state: str, now: int) -> RunRecord:
        """Make a failed run active again (see `Store.resume_run`)."""
        with self._lock:
            r = self.get_run(run_id)
            if r.status != "error" or r.version != expected_version:
                raise RunFinishedError(f"run {run_id} is not failed at version "
                                       f"{expected_version}; not resumed")  # fmt: skip
            record = replace(
                r, status=ACTIVE, snapshot=_copy(dict(snapshot)), state=state, updated_at=now,
                completed_at=None, failed_at=None, wake_at=now, lease_owner=None,
                lease_expires_at=None, attempt_count=0, version=r.version + 1)  # fmt: skip
            self._runs[run_id] = record
            failed = [e for e in self._effects.values()
                      if e.run_id == run_id and e.status == "failed"]  # fmt: skip
            last = max((e.step for e in failed), default=None)
            for e in failed:
                if e.step == last:
                    self._effects[e.idempotency_key] = replace(e, status="pending", result=None,
                                                               error=None, updated_at=now)
            self._events.append(EventRecord(self._new_id(), run_id, record.version,
                                            {"type": RESUME_EVENT}, state, state, now))
            return _copy(record)

    # -- inbox ------------------------------------------------------------------------------
    def _queue(self, run_id: str, event: Mapping[str, Any], now: int,
               traceparent: str | None = None) -> int:  # fmt: skip
        inbox_id = self._new_id()
        self._inbox[inbox_id] = InboxEvent(inbox_id, run_id, _copy(dict(event)), now,
                                           traceparent)  # fmt: skip
        return inbox_id

    def send_event(self, run_id: str, event: Mapping[str, Any], now: int, *,
                   traceparent: str | None = None) -> int:
        """Queue an event for an active run."""
        with self._lock:
            run = self.get_run(run_id)
            if run.status != ACTIVE:
                raise RunFinishedError(f"run {run_id} has ended ({run.status})")
            return self._queue(run_id, event, now, traceparent)

    def pending_events(self, run_id: str) -> list[InboxEvent]:
        """Queued events, oldest first."""
        with self._lock:
            return _copy(sorted((e for e in self._inbox.values() if e.run_id == run_id),
                                key=lambda e: e.id))  # fmt: skip

    # -- leases and steps -------------------------------------------------------------------
    def claim_runs(
        self,
        owner: str,
        now: int,
        lease_ms: int,
        limit: int,
        versions: Collection[tuple[str, str]] | None = None,
    ) -> list[RunRecord]:
        """Lease due runs and runs with queued events."""
        with self._lock:
            wanted = None if versions is None else set(versions)

            def eligible(r: RunRecord) -> bool:
                free = r.lease_owner is None or (r.lease_expires_at or 0) <= now
                known = wanted is None or (r.workflow_name, r.workflow_version) in wanted
                return free and known

            def asked(r: RunRecord) -> bool:
                return r.status == ACTIVE and eligible(r)

            due = sorted(
                (r for r in self._runs.values()
                 if r.wake_at is not None and r.wake_at <= now and eligible(r)),
                key=lambda r: r.wake_at or 0,
            )[:limit]  # fmt: skip
            with_events = {e.run_id for e in self._inbox.values()}
            ids = [r.id for r in due]
            for run_id in sorted(with_events):
                if len(ids) >= limit:
                    break
                if run_id not in ids and asked(self._runs[run_id]):
                    ids.append(run_id)
            expires = now + lease_ms
            claimed = []
            for run_id in ids:
                before = self._runs[run_id]
                record = replace(
                    before, lease_owner=owner, lease_expires_at=expires, wake_at=expires,
                    claim_count=before.claim_count + 1,
                )  # fmt: skip
                self._runs[run_id] = record
                claimed.append(_copy(replace(record, previous_owner=before.lease_owner,
                                             due_at=before.wake_at)))
            return claimed

    def heartbeat(self, owner: str, run_ids: Collection[str], now: int, lease_ms: int) -> set[str]:
        """Extend our leases."""
        with self._lock:
            held = set()
            for run_id in run_ids:
                r = self._runs.get(run_id)
                if r is not None and r.lease_owner == owner:
                    self._runs[run_id] = replace(
                        r, lease_expires_at=now + lease_ms, wake_at=now + lease_ms
                    )
                    held.add(run_id)
            return held

    def release(self, run_id: str, owner: str, wake_at: int | None, *,
                attempt_count: int | None = None, last_error: str | None = None) -> bool:
        """Give up a lease."""
        with self._lock:
            r = self._runs.get(run_id)
            if r is None or r.lease_owner != owner:
                return False
            pending = any(
                e.run_id == run_id and e.status == "pending" for e in self._effects.values()
            )
            wake = wake_at if (r.status == ACTIVE or pending) else None
            self._runs[run_id] = replace(
                r, lease_owner=None, lease_expires_at=None, wake_at=wake,
                attempt_count=r.attempt_count if attempt_count is None else attempt_count,
                last_error=r.last_error if last_error is None else last_error)  # fmt: skip
            return True

    def commit_step(self, commit: StepCommit, now: int) -> int:
        """Write a step atomically; `ConflictError` if the lease or version moved."""
        return only_version(self.commit_steps([commit], now), commit)

    def commit_steps(self, commits: Sequence[StepCommit], now: int) -> list[int | None]:
        """Write several runs' steps, each atomically: new versions, None where not written."""
        check_distinct_runs(commits)
        for commit in commits:
            check_status(commit.status)
            for run, _ in commit.start_runs:
                check_status(run.status)
        with self._lock:
            return [self._commit(c, now) if self._writable(c) else None for c in commits]

    def _writable(self, commit: StepCommit) -> bool:
        """The lease, the version and every outcome's pending effect are as `commit` expects."""
        r = self._runs.get(commit.run_id)
        if r is None or r.version != commit.expected_version or r.lease_owner != commit.owner:
            return False
        effects = (self._effects.get(o.idempotency_key) for o in commit.effect_outcomes)
        if any(e is None or e.run_id != commit.run_id or e.status != "pending" for e in effects):
            return False
        new_version = commit.expected_version + 1
        keys = (idempotency_key(commit.run_id, new_version, e.index) for e in commit.new_effects)
        return not any(key in self._effects for key in keys)

    def _commit(self, commit: StepCommit, now: int) -> int:
        r = self._runs[commit.run_id]
        new_version = commit.expected_version + 1
        completed_at, failed_at = completion_times(commit.status, now)
        lease: dict[str, Any] = {}
        if commit.release:
            lease = {"lease_owner": None, "lease_expires_at": None, "wake_at": commit.wake_at}
        elif commit.lease_until is not None:
            lease = {"lease_expires_at": commit.lease_until, "wake_at": commit.lease_until}
        self._runs[commit.run_id] = replace(
            r, state=commit.state, snapshot=_copy(commit.snapshot), status=commit.status,
            attempt_count=(r.attempt_count if commit.attempt_count is None
                           else commit.attempt_count),
            last_error=commit.last_error if commit.last_error is not None else r.last_error,
            workflow_version=commit.workflow_version or r.workflow_version,
            updated_at=now, completed_at=r.completed_at or completed_at,
            failed_at=r.failed_at or failed_at, version=new_version, **lease,
        )  # fmt: skip
        for outcome in commit.effect_outcomes:
            self._effects[outcome.idempotency_key] = replace(
                self._effects[outcome.idempotency_key], status=outcome.status,
                result=_copy(outcome.result), error=outcome.error, updated_at=now,
            )  # fmt: skip
        self._add_effects(commit.run_id, new_version, commit.new_effects, now)
        for inbox_id in commit.consumed_inbox:
            ev = self._inbox.get(inbox_id)
            if ev is not None and ev.run_id == commit.run_id:
                del self._inbox[inbox_id]
        if commit.status != ACTIVE:
            self._dead_letter(commit.run_id, commit.status, now)
        for run, run_effects in commit.start_runs:
            self.create_run(run, run_effects, now)
        for j in commit.journal:
            self._events.append(EventRecord(
                self._new_id(), commit.run_id, new_version, _copy(j.event), j.state_before,
                j.state_after, now,
            ))  # fmt: skip
        return new_version

    # -- effects and journal ----------------------------------------------------------------
    def list_effects(
        self, run_id: str, status: str | None = None, *, last: int | None = None
    ) -> list[EffectRecord]:
        """Outbox rows in (step, index) order (the newest `last` of them)."""
        check_last(last)
        with self._lock:
            rows = [
                e
                for e in self._effects.values()
                if e.run_id == run_id and (status is None or e.status == status)
            ]
            return _copy(_newest(sorted(rows, key=lambda e: (e.step, e.effect_index)), last))

    def list_events(self, run_id: str, *, last: int | None = None) -> list[EventRecord]:
        """Journal rows, oldest first (the newest `last` of them)."""
        check_last(last)
        with self._lock:
            return _copy(_newest([e for e in self._events if e.run_id == run_id], last))

    def count_events(self, run_id: str) -> int:
        """Journal rows of the run."""
        with self._lock:
            return sum(1 for e in self._events if e.run_id == run_id)

    def pending_work(self, run_ids: Collection[str]) -> dict[str, PendingWork]:
        """Pending effects and queued events of each run."""
        with self._lock:
            return {i: PendingWork(self.list_effects(i, "pending"), self.pending_events(i))
                    for i in run_ids}  # fmt: skip

    # -- reports ----------------------------------------------------------------------------
    def stuck_runs(self, now: int, older_than_ms: int, limit: int = 100) -> list[RunRecord]:
        """Active runs untouched for `older_than_ms`, not waiting for a later timer."""
        stuck = RunQuery(stuck_before=now - older_than_ms)
        with self._lock:
            rows = [r for r in self._runs.values() if stuck.matches(r)]
            return _copy(sorted(rows, key=lambda r: r.updated_at)[:limit])

    def unknown_versions(self, known: Collection[tuple[str, str]]) -> list[VersionCount]:
        """Active runs of versions not in `known`."""
        with self._lock:
            wanted = set(known)
            counts: dict[tuple[str, str, str], int] = {}
            for r in self._runs.values():
                label = r.snapshot.get("version")
                group = (
                    r.workflow_name,
                    r.workflow_version,
                    label if isinstance(label, str) else "",
                )
                if r.status == ACTIVE and group[:2] not in wanted:
                    counts[group] = counts.get(group, 0) + 1
            return [VersionCount(n, v, c, lb or None) for (n, v, lb), c in sorted(counts.items())]

    # -- helper tables ----------------------------------------------------------------------
    def try_claim(
        self, name: str, owner: str, now: int, stale_after_ms: int, run_id: str | None = None
    ) -> bool:
        """Take or refresh a claim."""
        with self._lock:
            current = self._claims.get(name)
            if current is not None and current.owner != owner and current.expires_at > now:
                return False
            self._claims[name] = ClaimRecord(name, owner, run_id, now, now + stale_after_ms)
            return True

    def release_claim(self, name: str, owner: str) -> bool:
        """Drop our claim."""
        with self._lock:
            current = self._claims.get(name)
            if current is None or current.owner != owner:
                return False
            del self._claims[name]
            return True

    def get_claim(self, name: str) -> ClaimRecord | None:
        """The claim record, if any."""
        with self._lock:
            return self._claims.get(name)

    def get_breaker(self, name: str) -> BreakerRecord | None:
        """Stored breaker state."""
        with self._lock:
            return _copy(self._breakers.get(name))

    def put_breaker(self, record: BreakerRecord, expected_version: int, now: int) -> bool:
        """Compare-and-set breaker state."""
        with self._lock:
            current = self._breakers.get(record.name)
            if (current.version if current else 0) != expected_version:
                return False
            self._breakers[record.name] = replace(
                _copy(record), updated_at=now, version=expected_version + 1
            )
            return True

    def get_schedule(self, name: str) -> ScheduleRecord | None:
        """Stored schedule state."""
        with self._lock:
            return self._schedules.get(name)

    def fire_schedule(
        self,
        name: str,
        expected_version: int,
        fire_at: int,
        run: NewRun,
        effects: Sequence[NewEffect],
        now: int,
    ) -> RunRecord | None:
        """Advance the schedule and create its run together."""
        with self._lock:
            current = self._schedules.get(name)
            if (current.version if current else 0) != expected_version:
                return None
            record, _ = self.create_run(run, effects, now)
            self._schedules[name] = ScheduleRecord(name, fire_at, expected_version + 1)
            return record
