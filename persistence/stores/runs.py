"""Runs in SQL (the run rows of `RunStore`), written once for both dialects: a run created (with
the child runs and deliveries its first step makes, under its key's conflict rule), read,
cancelled, failed and resumed, and what a run's end does to the runs related to it (its
children cancelled, its parent told, its calls stopped).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from persistence.stores.calls import SQLCalls
from persistence.stores.codec import Column
from persistence.stores.conflicts import retried
from persistence.stores.dialect import EFFECT_NAMES, RUN_NAMES
from persistence.stores.errors import ConflictError, RunFinishedError, RunNotFoundError
from persistence.stores.inbox import SYSTEM_ID_HOLDER, SQLInbox
from persistence.stores.records import (
    ACTIVE,
    Delivery,
    EffectOutcome,
    NewEffect,
    NewRun,
    RunRecord,
)
from persistence.stores.rules import (
    FAILED_EVENT,
    RESUME_EVENT,
    STOPPED_BY_END,
    cancel_event,
    check_status,
    check_unkeyed,
    child_ended_event,
    completion_times,
    idempotency_key,
    is_call,
    unowned_calls,
)
from persistence.stores.run_ids import new_run_id
from statecharts.errors import SystemIdTakenError

READ_PAGE = 500
"""Ids per statement of `get_runs` (SQLite's older builds take at most 999 parameters)."""

ACTIVE_KEY_CONFLICT = (
    "ON CONFLICT (workflow_name, key) WHERE status = 'active' AND key IS NOT "
    "NULL AND parent_run_id IS NULL"
)
"""The conflict target of an idempotent start: the unique index of active top-level keys
(child runs are named under their parent and started once by the step that starts them)."""


class SQLRuns(SQLInbox, SQLCalls):
    """Runs in SQL: created (with the child runs and deliveries of their first steps), read,
    cancelled, failed and resumed; what a run's end does to the runs related to it."""

    _START_CONFLICT = f"{ACTIVE_KEY_CONFLICT} DO NOTHING"
    """The conflict clause of a start's insert (Citus: none, its keys are claimed first in a
    table of their own, `persistence.stores.citus`)."""

    def new_child_id(self, parent_run_id: str) -> str:
        """A random run id (`RunStore.new_child_id`)."""
        return new_run_id()

    @retried
    def create_run(
        self,
        run: NewRun,
        effects: Sequence[NewEffect],
        now: int,
        *,
        children: Sequence[tuple[NewRun, Sequence[NewEffect]]] = (),
        key_once: bool = False,
    ) -> tuple[RunRecord, bool]:
        """Insert a run and its initial effects, or return the active run with the same key
        (with `key_once`, the newest with it, ended too); the child runs its first step starts
        with it."""
        once = key_once and run.key is not None
        one = (
            self._CREATE_IS_ONE_STATEMENT
            and not children
            and not run.deliveries
            and not once
            and not run.search
        )
        with self._statement_write() if one else self._write() as conn:
            holder = self._key_holder_in(conn, run, now) if once else None
            record, created = (
                (holder, False)
                if holder is not None
                else self._create_run_in(conn, run, effects, now)
            )
            if created:
                self._create_all_in(conn, [(run, ())], list(children), now)
        if created and children:
            self.wakeup().notify()
        elif created:
            self._tell_started([(run, effects)], now)
        return record, created

    @retried
    def create_runs(
        self, runs: Sequence[tuple[NewRun, Sequence[NewEffect]]], now: int
    ) -> list[RunRecord]:
        """Insert runs without keys in one transaction (`RunStore.create_runs`)."""
        check_unkeyed(runs)
        with self._write() as conn:
            records = [self._create_run_in(conn, run, effects, now)[0] for run, effects in runs]
            self._create_all_in(conn, runs, (), now)
        self._tell_started(runs, now)
        return records

    def _tell_started(self, runs: Sequence[tuple[NewRun, Sequence[NewEffect]]], now: int) -> None:
        """Wake the workers once for runs just inserted that have work due (or calls no
        executor holds)."""
        if any(
            (run.lease_owner is None and run.wake_at is not None and run.wake_at <= now)
            or unowned_calls(effects, run.call_lease)
            for run, effects in runs
        ):
            self.wakeup().notify()

    def _create_in(
        self, conn: Any, run: NewRun, effects: Sequence[NewEffect], now: int
    ) -> tuple[RunRecord, bool]:
        check_status(run.status)
        completed_at, failed_at = completion_times(run.status, now)
        rows = self._exec(
            conn,
            f"INSERT INTO workflow_runs ({RUN_NAMES}) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, NULL) "
            f"{self._START_CONFLICT} RETURNING {self.RUN_COLUMNS}",
            (
                self._id(run.id),
                run.workflow_name,
                run.workflow_version,
                run.key,
                run.state,
                self._seal(run.snapshot, self._id(run.id), Column.SNAPSHOT),
                run.status,
                run.attempt_count,
                self._t(now),
                self._t(now),
                self._t(completed_at),
                self._t(failed_at),
                run.last_error,
                self._t(run.wake_at),
                run.lease_owner,
                self._t(run.wake_at if run.lease_owner else None),
                int(bool(run.lease_owner)),
                run.traceparent,
                run.parent_run_id,
                run.parent_invoke_id,
                run.priority,
            ),
        ).fetchall()
        if rows:
            self._insert_effects(conn, run.id, 1, effects, now)
            self._insert_calls_in(conn, run.id, 1, effects, now, run.call_lease)
            self._share_of(conn, run)
            return self._run(rows[0]), True
        existing = self._keyed_in(conn, run, ended_too=False)
        if existing is None:
            raise ConflictError(f"could not insert or find run with key {run.key!r}")
        return existing, False

    def _create_run_in(
        self, conn: Any, run: NewRun, effects: Sequence[NewEffect], now: int
    ) -> tuple[RunRecord, bool]:
        """`_create_in`, with the run's search attributes when it was created."""
        record, created = self._create_in(conn, run, effects, now)
        if created and run.search:
            self._many(
                conn,
                "INSERT INTO workflow_search (run_id, name, value) VALUES (?, ?, ?)",
                [(self._id(run.id), name, value) for name, value in run.search],
            )
        return record, created

    def _search_in(self, conn: Any, run_id: str, changed: Mapping[str, str | None]) -> None:
        """Write the search attributes a step changed (`StepCommit.search`) of run `run_id`."""
        self._many(
            conn,
            "INSERT INTO workflow_search (run_id, name, value) VALUES (?, ?, ?) "
            "ON CONFLICT (run_id, name) DO UPDATE SET value = excluded.value",
            [(run_id, n, v) for n, v in changed.items() if v is not None],
        )
        self._many(
            conn,
            "DELETE FROM workflow_search WHERE run_id = ? AND name = ?",
            [(run_id, n) for n, v in changed.items() if v is None],
        )

    def _create_all_in(
        self,
        conn: Any,
        created: Sequence[tuple[NewRun, Sequence[NewEffect]]],
        runs: Sequence[tuple[NewRun, Sequence[NewEffect]]],
        now: int,
    ) -> None:
        """Create `runs` (after `created`, already inserted), then queue the events the first
        steps of all of them send, now that every one of them exists."""
        for run, run_effects in runs:
            if run.system_id and run.parent_run_id is not None:
                self._check_system_id_free(conn, run)
            self._create_run_in(conn, run, run_effects, now)
        for run, _ in [*created, *runs]:
            for delivery in run.deliveries:
                self._deliver_in(conn, self._id(run.id), delivery, now)

    def _check_system_id_free(self, conn: Any, run: NewRun) -> None:
        """`SystemIdTakenError` naming both runs when an active child run of the tree `run`
        joins (its parent's) holds `run.system_id`; checked under `_LOCK_TREE`, so two
        transactions cannot both register one systemId in one tree."""
        assert run.parent_run_id is not None and run.system_id is not None
        self._lock_tree_in(conn, self._id(run.parent_run_id))
        tree, tree_params = self._tree_in(conn, self._id(run.parent_run_id))
        held = self._exec(
            conn,
            f"{tree}SELECT id{self._TEXT_ID}, workflow, parent, invoke FROM tree "
            f"WHERE {SYSTEM_ID_HOLDER} LIMIT 1",
            (*tree_params, run.system_id),
        ).fetchall()
        if held:
            holder, workflow, parent, invoke = held[0]
            raise SystemIdTakenError(
                run.system_id,
                f"child run {holder} ({workflow}, child {invoke!r} of run {parent})",
                f"child {run.parent_invoke_id!r} ({run.workflow_name}) of run {run.parent_run_id}",
            )

    def _share_of(self, conn: Any, run: NewRun) -> None:
        """Write which limit a new run's steps take a place of (`NewRun.limit_share`)."""
        if run.limit_share is not None:
            self._exec(
                conn,
                "UPDATE workflow_runs SET limit_share = ? WHERE id = ?",
                (run.limit_share, self._id(run.id)),
            )

    def _key_holder_in(self, conn: Any, run: NewRun, now: int) -> RunRecord | None:
        """The newest top-level run of `run`'s workflow with its key, whatever its status, read
        under the key's lock (`_LOCK_KEY`) until the transaction ends: two starts with one key
        decide in turn, the second seeing the first's run even if it has ended meanwhile."""
        if self._LOCK_KEY:
            self._exec(conn, self._LOCK_KEY, (run.workflow_name, run.key))
        return self._keyed_in(conn, run, ended_too=True)

    def _keyed_in(self, conn: Any, run: NewRun, *, ended_too: bool) -> RunRecord | None:
        """The newest top-level run of `run`'s workflow with its key (active only, unless
        `ended_too`), or None."""
        active = "" if ended_too else "AND status = 'active' "
        rows = self._exec(
            conn,
            f"SELECT {self.RUN_COLUMNS} FROM workflow_runs WHERE workflow_name = ? AND key = ? "
            f"{active}AND parent_run_id IS NULL ORDER BY created_at DESC LIMIT 1",
            (run.workflow_name, run.key),
        ).fetchall()
        return self._run(rows[0]) if rows else None

    def _insert_effects(
        self, conn: Any, run_id: str, step: int, effects: Sequence[NewEffect], now: int
    ) -> None:
        rid = self._id(run_id)
        self._many(
            conn,
            f"INSERT INTO workflow_effects ({EFFECT_NAMES}) "
            "VALUES (?, ?, ?, ?, ?, ?, 'pending', NULL, NULL, ?, ?)",
            [
                (
                    idempotency_key(run_id, step, e.index),
                    run_id,
                    step,
                    e.index,
                    e.kind,
                    self._seal(e.payload, rid, Column.EFFECT_PAYLOAD),
                    self._t(now),
                    self._t(now),
                )
                for e in effects
                if not is_call(e)
            ],
        )

    def get_run(self, run_id: str) -> RunRecord:
        """The run with this id."""
        rows = self._read(
            f"SELECT {self.RUN_COLUMNS} FROM workflow_runs WHERE id = ?", (self._id(run_id),)
        )
        if not rows:
            raise RunNotFoundError(f"no run with id {run_id!r}")
        return self._run(rows[0])

    def get_runs(self, run_ids: Collection[str]) -> dict[str, RunRecord]:
        """The runs with these ids, by id (one read per `READ_PAGE` ids); an id no run has is
        left out."""
        ids = list(dict.fromkeys(run_ids))
        found: dict[str, RunRecord] = {}
        for first in range(0, len(ids), READ_PAGE):
            page = ids[first : first + READ_PAGE]
            rows = self._read(
                f"SELECT {self.RUN_COLUMNS} FROM workflow_runs WHERE id IN "
                f"({', '.join('?' * len(page))})",
                tuple(self._id(run_id) for run_id in page),
            )
            found.update((run.id, run) for run in map(self._run, rows))
        return found

    def find_run(self, workflow_name: str, key: str) -> RunRecord | None:
        """The active run with this start key."""
        rows = self._read(
            f"SELECT {self.RUN_COLUMNS} FROM workflow_runs WHERE workflow_name = ? AND key = ? "
            "AND status = 'active'",
            (workflow_name, key),
        )
        return self._run(rows[0]) if rows else None

    @retried
    def cancel_run(
        self,
        run_id: str,
        now: int,
        reason: str | None = None,
        *,
        cancelled: list[str] | None = None,
    ) -> str:
        """Cancel directly if no live lease, else queue a cancel event for the holder; its
        active child runs are cancelled with it (recursively)."""
        ended: list[str] = []
        with self._write() as conn:
            outcome = self._cancel_in(conn, run_id, now, reason, ended)
        if cancelled is not None:
            cancelled.extend(ended)
        return outcome

    def _cancel_in(
        self,
        conn: Any,
        run_id: str,
        now: int,
        reason: str | None,
        cancelled: list[str],
        by_parent: bool = False,
    ) -> str:
        """`cancel_run` in the open transaction; the workflow name of each run it cancels (not
        those whose holder it asks) is appended to `cancelled`. A run its parent stops
        (`by_parent`) is detached from the invoke first, so it reports its end to no one."""
        rid, ts = self._id(run_id), self._t(now)
        if by_parent:
            self._exec(
                conn, "UPDATE workflow_runs SET parent_invoke_id = NULL WHERE id = ?", (rid,)
            )
        rows = self._exec(
            conn,
            "SELECT status, lease_owner, lease_expires_at, state, version, parent_run_id, "
            f"parent_invoke_id, workflow_name FROM workflow_runs WHERE id = ?{self._FOR_UPDATE}",
            (rid,),
        ).fetchall()
        if not rows:
            raise RunNotFoundError(f"no run with id {run_id!r}")
        status, owner, expires, state, version, parent, invoke, workflow = rows[0]
        if status != ACTIVE:
            return "finished"
        if owner is not None and expires is not None and self._ms(expires) > now:
            self._exec(
                conn,
                "INSERT INTO workflow_inbox (run_id, event, created_at) VALUES (?, ?, ?)",
                (rid, self._seal(cancel_event(reason), rid, Column.EVENT), ts),
            )
            return "requested"
        self._exec(
            conn,
            "UPDATE workflow_runs SET status = 'cancelled', completed_at = ?, updated_at = ?, "
            "last_error = coalesce(?, last_error), wake_at = NULL, lease_owner = NULL, "
            "lease_expires_at = NULL, version = version + 1 WHERE id = ?",
            (ts, ts, reason, rid),
        )
        self._exec(
            conn,
            "UPDATE workflow_effects SET status = 'skipped', result = ?, updated_at = ? "
            "WHERE run_id = ? AND status = 'pending'",
            (self._seal("cancelled", rid, Column.EFFECT_RESULT), ts, rid),
        )
        self._dead_letter(conn, rid, "cancelled", ts)
        self._journal_one(conn, rid, version + 1, cancel_event(reason), state, ts)
        cancelled.append(str(workflow))
        self._ended_in(
            conn,
            rid,
            parent,
            invoke,
            now,
            child_ended_event(invoke or "", "cancelled", reason=reason),
            cancelled,
        )
        return "cancelled"

    def _ended_in(
        self,
        conn: Any,
        run_id: str,
        parent: str | None,
        invoke: str | None,
        now: int,
        event: Mapping[str, Any],
        cancelled: list[str],
    ) -> None:
        """What a run's end does to related runs, in its transaction: its active children are
        cancelled (recursively, their workflow names appended to `cancelled`) and its parent,
        if it still waits for it, gets `event`; its open calls are stopped; whoever waits on
        it is told."""
        self._tell_waiters_in(conn, run_id)
        self._stop_calls_in(conn, run_id, None, None, now, STOPPED_BY_END)
        self._stop_children_in(conn, run_id, None, now, cancelled)
        if parent is not None and invoke is not None:
            self._deliver_in(
                conn, run_id, Delivery(dict(event), parent=parent, completes=True), now
            )

    def _stop_children_in(
        self,
        conn: Any,
        run_id: str,
        invoke_ids: Sequence[str] | None,
        now: int,
        cancelled: list[str],
    ) -> None:
        """Cancel the active child runs of `run_id` (only those of `invoke_ids` if given)."""
        sql = "SELECT id FROM workflow_runs WHERE parent_run_id = ? AND status = 'active'"
        params: tuple[Any, ...] = (run_id,)
        if invoke_ids is not None:
            if not invoke_ids:
                return
            sql += f" AND parent_invoke_id IN ({','.join('?' * len(invoke_ids))})"
            params += tuple(invoke_ids)
        for (child,) in self._exec(conn, sql, params).fetchall():
            self._cancel_in(
                conn,
                str(child),
                now,
                f"stopped by its parent run {run_id}",
                cancelled,
                by_parent=True,
            )

    def _journal_one(
        self, conn: Any, run_id: str, step: int, event: Mapping[str, Any], state: str, ts: Any
    ) -> None:
        """Journal an event the store applied itself (cancel, failure, resume): the state stays."""
        self._exec(
            conn,
            "INSERT INTO workflow_events (run_id, step, event, state_before, state_after, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, step, self._seal(dict(event), run_id, Column.JOURNAL), state, state, ts),
        )

    @retried
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
        """End a leased run as `error` without rewriting its snapshot."""
        ended: list[str] = []
        with self._write() as conn:
            failed = self._fail_in(
                conn,
                run_id,
                owner,
                reason,
                now,
                outcomes,
                start_runs,
                attempt_count,
                ended,
                error_traceback,
            )
        if cancelled is not None:
            cancelled.extend(ended)
        return failed

    def _fail_in(
        self,
        conn: Any,
        run_id: str,
        owner: str,
        reason: str,
        now: int,
        outcomes: Sequence[EffectOutcome],
        start_runs: Sequence[tuple[NewRun, Sequence[NewEffect]]],
        attempt_count: int | None,
        cancelled: list[str],
        error_traceback: str | None = None,
    ) -> bool:
        rid, ts = self._id(run_id), self._t(now)
        rows = self._exec(
            conn,
            "UPDATE workflow_runs SET status = 'error', last_error = ?, error_traceback = ?, "
            "updated_at = ?, "
            "completed_at = ?, failed_at = ?, wake_at = NULL, lease_owner = NULL, "
            "lease_expires_at = NULL, version = CAST(version AS bigint) + 1, "
            "attempt_count = coalesce(?, attempt_count) "
            "WHERE id = ? AND lease_owner = ? RETURNING version, state, parent_run_id, "
            "parent_invoke_id",
            (reason, error_traceback, ts, ts, ts, attempt_count, rid, owner),
        ).fetchall()
        if not rows:
            return False
        version, state, parent, invoke = rows[0]
        self._many(
            conn,
            "UPDATE workflow_effects SET status = ?, result = NULL, error = ?, updated_at = ? "
            "WHERE idempotency_key = ? AND run_id = ? AND status = 'pending'",
            [(o.status, o.error, ts, o.idempotency_key, rid) for o in outcomes],
        )
        self._dead_letter(conn, rid, "error", ts)
        self._journal_one(
            conn, rid, version, {"type": FAILED_EVENT, "reason": reason}, str(state), ts
        )
        self._create_all_in(conn, (), start_runs, now)
        self._ended_in(
            conn,
            rid,
            parent,
            invoke,
            now,
            child_ended_event(invoke or "", "error", reason=reason),
            cancelled,
        )
        return True

    @retried
    def resume_run(
        self,
        run_id: str,
        expected_version: int,
        snapshot: Mapping[str, Any],
        state: str,
        now: int,
        *,
        withdraw: tuple[str, str] | None = None,
    ) -> RunRecord:
        """Make a failed run active again (see `Store.resume_run`)."""
        rid, ts = self._id(run_id), self._t(now)
        with self._write() as conn:
            if withdraw is not None:
                self._withdraw_end_in(conn, run_id, *withdraw, now)
            run = self._reactivate_in(
                conn, run_id, expected_version, snapshot, state, now, now, "resumed"
            )
            self._exec(
                conn,
                "UPDATE workflow_effects SET status = 'pending', result = NULL, error = NULL, "
                "updated_at = ? WHERE run_id = ? AND status = 'failed' AND step = (SELECT "
                "max(step) FROM workflow_effects WHERE run_id = ? AND status = 'failed')",
                (ts, rid, rid),
            )
            self._reopen_calls_in(conn, rid, list(snapshot.get("children") or ()), now)
            self._journal_one(conn, rid, run.version, {"type": RESUME_EVENT}, state, ts)
            return run

    def _reactivate_in(
        self,
        conn: Any,
        run_id: str,
        expected_version: int,
        snapshot: Mapping[str, Any],
        state: str,
        wake_at: int | None,
        now: int,
        what: str,
    ) -> RunRecord:
        """A failed run active again from `snapshot` (a resume, a reset: `what`), due at
        `wake_at`, in the open transaction; `RunFinishedError` unless it is `error` at
        `expected_version`."""
        rid = self._id(run_id)
        self._reclaim_key_in(conn, run_id, what)
        rows = self._exec(
            conn,
            "UPDATE workflow_runs SET status = 'active', snapshot = ?, state = ?, "
            "updated_at = ?, completed_at = NULL, failed_at = NULL, wake_at = ?, "
            "lease_owner = NULL, lease_expires_at = NULL, attempt_count = 0, "
            "version = version + 1 WHERE id = ? AND status = 'error' AND version = ? "
            f"RETURNING {self.RUN_COLUMNS}",
            (
                self._seal(dict(snapshot), rid, Column.SNAPSHOT),
                state,
                self._t(now),
                self._t(wake_at),
                rid,
                expected_version,
            ),
        ).fetchall()
        if not rows:
            raise RunFinishedError(
                f"run {run_id} is not failed at version {expected_version}; not {what}"
            )
        return self._run(rows[0])

    def _reclaim_key_in(self, conn: Any, run_id: str, what: str) -> None:
        """A top-level run with a key made active again takes its key back: refused
        (`ConflictError` naming the run that has it) while another run with the key is
        active, since one key names one active run."""
        rows = self._exec(
            conn,
            "SELECT workflow_name, key FROM workflow_runs WHERE id = ? AND key IS NOT NULL "
            "AND parent_run_id IS NULL",
            (self._id(run_id),),
        ).fetchall()
        if not rows:
            return
        name, key = rows[0]
        holder = self._active_with_key_in(conn, run_id, name, key)
        if holder is not None:
            raise ConflictError(
                f"run {run_id}: run {holder} of {name!r} is active with its key {key!r}; "
                f"not {what} (cancel that run first, or let it end)"
            )

    def _active_with_key_in(self, conn: Any, run_id: str, name: str, key: str) -> str | None:
        """The other active top-level run of `name` with `key`, if any (`_reclaim_key_in`;
        the unique index on active keys is the last word where a start races the resume)."""
        rows = self._exec(
            conn,
            f"SELECT id{self._TEXT_ID} FROM workflow_runs WHERE workflow_name = ? AND key = ? "
            "AND status = 'active' AND parent_run_id IS NULL AND id <> ?",
            (name, key, self._id(run_id)),
        ).fetchall()
        return str(rows[0][0]) if rows else None

    def _withdraw_end_in(
        self, conn: Any, run_id: str, parent: str, event_type: str, now: int
    ) -> None:
        """Take back the queued `event_type` that reported child run `run_id`'s failure to
        its parent `parent`, which has not applied it; `ConflictError` naming the parent if it
        has (or may be applying it now: a worker holds it)."""
        pid = self._id(parent)
        rows = self._exec(
            conn,
            "SELECT lease_owner, lease_expires_at FROM workflow_runs WHERE "
            f"id = ? AND status = 'active'{self._FOR_UPDATE}",
            (pid,),
        ).fetchall()
        if rows and rows[0][0] is not None and self._ms(rows[0][1]) > now:
            raise ConflictError(
                f"run {run_id}: its parent run {parent} is being stepped by "
                f"{rows[0][0]}; try again when it is idle"
            )
        queued = self._exec(
            conn,
            "SELECT id, event FROM workflow_inbox WHERE run_id = ? AND dead_at IS NULL ORDER BY id",
            (pid,),
        ).fetchall()
        ids = [
            i
            for i, event in queued
            if self._open(event, pid, Column.EVENT).get("type") == event_type
        ]
        if not rows or not ids:
            raise ConflictError(
                f"run {run_id}: its parent run {parent} already took its "
                f"result ({event_type}); resuming it would report a second one"
            )
        self._exec(conn, "DELETE FROM workflow_inbox WHERE id = ?", (ids[0],))
