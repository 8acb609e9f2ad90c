"""Steps in SQL (the step writes of `RunStore`), written once for both dialects: a run's pending
work read, and its steps written under their fence (`_commit_in`: at the version read, under
the writer's lease or, for a step with no claim, while nobody holds the run), each with its
outbox, consumed inbox rows, journal, stopped calls and what it does to other runs; a sent
event queued and stepped in one commit (`send_and_step`, `finish_calls`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Generic, NamedTuple

from persistence.stores.codec import Column, PayloadCodecError
from persistence.stores.conflicts import retried
from persistence.stores.dialect import INBOX_NAMES
from persistence.stores.errors import ConflictError, RunFinishedError, RunNotFoundError
from persistence.stores.inbox import _QUEUE_EVENT
from persistence.stores.planners import PlanT, Sent, StepPlanner
from persistence.stores.records import (
    ACTIVE,
    CallFinish,
    PendingWork,
    RunRecord,
    StepCommit,
)
from persistence.stores.rules import (
    HELD_FENCE,
    STOPPED_BY_END,
    STOPPED_BY_EXIT,
    UNLEASED_FENCE,
    check_distinct_runs,
    check_status,
    completion_times,
    only_version,
    unowned_calls,
)
from persistence.stores.runs import SQLRuns

JOURNAL_INSERT = (
    "INSERT INTO workflow_events (run_id, step, event, state_before, state_after, "
    "created_at, inbox_id, snapshot) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
"""A step's journal rows (with the inbox row of each event: a waiting sender's find), the
last with the snapshot after the step (the run lifecycle's fork and reset)."""


class _Queued(NamedTuple, Generic[PlanT]):
    """A sent event queued in an open transaction (`SQLSteps._send_in`), for `_sent`."""

    inbox_id: int
    rid: str
    plan: PlanT | None  # the step planned with it, written by the transaction
    written: Callable[[], int | None] | None  # the step's new version, once committed
    due: bool


class SQLSteps(SQLRuns):
    """Steps in SQL: a run's pending work read, its steps written under their fence (the
    lease and version, or no lease at all), a sent event queued and stepped in one commit."""

    def _step_extras_in(
        self, conn: Any, commit: StepCommit, now: int, cancelled: list[str]
    ) -> None:
        """What a committed step does to other runs, in its transaction, in this order: the
        child runs it stops are cancelled (recursively, into `cancelled`), the runs it starts
        created, its deliveries queued."""
        rid = self._id(commit.run_id)
        self._stop_children_in(conn, rid, commit.stop_children, now, cancelled)
        self._create_all_in(conn, (), commit.start_runs, now)
        for delivery in commit.deliveries:
            self._deliver_in(conn, rid, delivery, now)

    def commit_step(self, commit: StepCommit, now: int) -> int:
        """Write one step atomically; `ConflictError` if the lease or version moved."""
        return only_version(self.commit_steps([commit], now), commit)

    @retried
    def commit_steps(
        self, commits: Sequence[StepCommit], now: int, *, cancelled: list[str] | None = None
    ) -> list[int | None]:
        """Write several runs' steps in one transaction; each under a savepoint, so a step
        whose lease or version moved writes nothing (None) and the others are kept."""
        check_distinct_runs(commits)
        for commit in commits:
            check_status(commit.status)
        ended: list[str] = []
        with self._write() as conn:
            versions = self._commit_all_in(conn, commits, now, ended)
        if cancelled is not None:
            cancelled.extend(ended)
        if any(unowned_calls(c.new_effects, c.call_lease) for c in commits):
            self.wakeup().notify()
        return versions

    def _commit_all_in(
        self, conn: Any, commits: Sequence[StepCommit], now: int, cancelled: list[str]
    ) -> list[int | None]:
        """`commit_steps` in the open transaction: each step under a savepoint, so one whose
        lease or version moved writes nothing (None) and the others are kept."""
        versions: list[int | None] = []
        refused: tuple[type[Exception], ...] = (ConflictError, *self._INTEGRITY_ERRORS)
        for commit in commits:
            self._exec(conn, "SAVEPOINT step")
            stopped: list[str] = []
            try:
                versions.append(self._commit_in(conn, commit, now, stopped))
                cancelled += stopped
            except refused:
                self._exec(conn, "ROLLBACK TO SAVEPOINT step")
                versions.append(None)
            self._exec(conn, "RELEASE SAVEPOINT step")
        return versions

    def _commit_later_in(
        self, conn: Any, commit: StepCommit, now: int, cancelled: list[str]
    ) -> Callable[[], int | None]:
        """`_commit_all_in` of one step, its new version read by the function returned, once
        the transaction has ended (PostgreSQL: its statement then rides with the COMMIT)."""
        (version,) = self._commit_all_in(conn, [commit], now, cancelled)
        return lambda: version

    def _commit_in(self, conn: Any, commit: StepCommit, now: int, cancelled: list[str]) -> int:
        """Write `commit` in the open transaction (the child runs it cancels into
        `cancelled`); `ConflictError` if it must not be."""
        completed_at, failed_at = completion_times(commit.status, now)
        new_version = commit.expected_version + 1
        rid, ts = self._id(commit.run_id), self._t(now)
        lease_sql, lease_params = _lease_update(commit, self._t)
        # named only by the rare step that fails its run with one: the hot statement as it was
        traceback_sql, traceback_params = (
            (" error_traceback = ?,", (commit.error_traceback,))
            if commit.error_traceback is not None
            else ("", ())
        )
        fence, fence_params = (
            (UNLEASED_FENCE, (commit.expected_version,))
            if commit.unleased  # nobody may hold it (nor may it have ended meanwhile)
            else (HELD_FENCE, (commit.expected_version, commit.owner))
        )
        cursor = self._exec(
            conn,
            "UPDATE workflow_runs SET state = ?, snapshot = ?, status = ?, "
            "attempt_count = coalesce(?, attempt_count), last_error = coalesce(?, last_error),"
            f"{traceback_sql} workflow_version = coalesce(?, workflow_version),"
            " updated_at = ?, completed_at = coalesce(completed_at, ?), "
            f"failed_at = coalesce(failed_at, ?), version = ?{lease_sql} "
            f"WHERE id = ? AND {fence.format(r='', expected='?', owner='?')}",
            (
                commit.state,
                self._seal(commit.snapshot, rid, Column.SNAPSHOT),
                commit.status,
                commit.attempt_count,
                commit.last_error,
                *traceback_params,
                commit.workflow_version,
                ts,
                self._t(completed_at),
                self._t(failed_at),
                new_version,
                *lease_params,
                rid,
                *fence_params,
            ),
        )
        if cursor.rowcount != 1:
            holder_text = "with no lease" if commit.unleased else f"under lease of {commit.owner!r}"
            raise ConflictError(
                f"run {commit.run_id}: not at version {commit.expected_version} {holder_text}; "
                "step not written"
            )
        for outcome in commit.effect_outcomes:
            done = self._exec(
                conn,
                "UPDATE workflow_effects SET status = ?, result = ?, error = ?, updated_at = ? "
                "WHERE idempotency_key = ? AND run_id = ? AND status = 'pending'",
                (
                    outcome.status,
                    self._seal(outcome.result, rid, Column.EFFECT_RESULT),
                    outcome.error,
                    ts,
                    outcome.idempotency_key,
                    rid,
                ),
            )
            if done.rowcount != 1:
                raise ConflictError(
                    f"effect {outcome.idempotency_key} is not pending; step not written"
                )
        if commit.search:
            self._search_in(conn, rid, commit.search)
        self._insert_effects(conn, commit.run_id, new_version, commit.new_effects, now)
        self._insert_calls_in(
            conn, commit.run_id, new_version, commit.new_effects, now, commit.call_lease
        )
        if commit.consumed_inbox:
            marks = ",".join("?" * len(commit.consumed_inbox))
            self._exec(
                conn,
                f"DELETE FROM workflow_inbox WHERE run_id = ? AND id IN ({marks})",
                (rid, *commit.consumed_inbox),
            )
        self._stop_calls_in(
            conn,
            rid,
            commit.stop_calls,
            new_version,
            now,
            STOPPED_BY_EXIT if commit.status == ACTIVE else STOPPED_BY_END,
            drop=commit.status == ACTIVE,
        )
        if commit.status != ACTIVE:
            self._dead_letter(conn, rid, commit.status, ts)
        self._step_extras_in(conn, commit, now, cancelled)
        last = len(commit.journal) - 1  # its row carries the snapshot after the step
        self._many(
            conn,
            JOURNAL_INSERT,
            [
                (
                    rid,
                    new_version,
                    self._seal(j.event, rid, Column.JOURNAL),
                    j.state_before,
                    j.state_after,
                    ts,
                    j.inbox_id,
                    self._seal(commit.snapshot, rid, Column.SNAPSHOT) if n == last else None,
                )
                for n, j in enumerate(commit.journal)
            ],
        )
        return new_version

    def read_work(self, run_ids: Collection[str]) -> list[tuple[RunRecord, PendingWork]]:
        """The existing runs among `run_ids` with their pending work, without a lease."""
        ids = [self._id(i) for i in run_ids]
        if not ids:
            return []
        rows = self._read(
            f"SELECT {self.RUN_COLUMNS} FROM workflow_runs WHERE id IN "
            f"({','.join('?' * len(ids))})",
            ids,
        )
        runs = [self._run(r) for r in rows]
        work = self.pending_work([run.id for run in runs])
        return [(run, work[run.id]) for run in runs]

    def pending_work(self, run_ids: Collection[str]) -> dict[str, PendingWork]:
        """Pending effects and queued events of each run (two reads, one round trip where the
        dialect pipelines them)."""
        ids = {self._id(i): i for i in run_ids}
        if not ids:
            return {}
        return self._work_of(ids, self._read_all(self._work_queries(list(ids))))

    def _work_queries(self, ids: list[str]) -> list[tuple[str, Sequence[Any]]]:
        """The two reads of `pending_work` (pending effects, live inbox events) of `ids`."""
        marks = ",".join("?" * len(ids))
        return [
            (
                f"SELECT {self.EFFECT_COLUMNS} FROM workflow_effects WHERE run_id IN ({marks}) "
                "AND status = 'pending' ORDER BY run_id, step, effect_index",
                ids,
            ),
            (
                f"SELECT {INBOX_NAMES.format(t=self._TEXT_ID)} FROM workflow_inbox "
                f"WHERE run_id IN ({marks}) AND dead_at IS NULL ORDER BY id",
                ids,
            ),
        ]

    def _work_of(
        self, ids: Mapping[str, str], rows: Sequence[Sequence[Any]]
    ) -> dict[str, PendingWork]:
        """`_work_queries`' rows as each run's `PendingWork`, keyed by the ids as given."""
        effect_rows, inbox_rows = rows
        work = {canonical: PendingWork([], []) for canonical in ids}
        problems: dict[str, str] = {}
        for row in effect_rows:
            try:
                work[row[1]].effects.append(self._effect(row))
            except PayloadCodecError as exc:
                problems.setdefault(row[1], str(exc))
        for row in inbox_rows:
            try:
                work[row[1]].inbox.append(self._inbox(row))
            except PayloadCodecError as exc:
                problems.setdefault(row[1], str(exc))
        for canonical, problem in problems.items():
            work[canonical] = PendingWork([], [], problem)
        return {given: work[canonical] for canonical, given in ids.items()}

    @retried
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
        """`send_event`, and the step that applies the event in the same transaction when
        `planner` (handed the run, locked, with its pending work, the event last in its inbox)
        plans one: written as `commit_steps` writes it, so the event is queued and consumed
        in one commit; else it stays queued and a worker is woken for it. Returns the inbox
        id, the run's new version (None: queued) and the plan written. `cancelled` as in
        `commit_steps`. `rest` is not used here (SQLite's reads are in-process; PostgreSQL's
        dialect steps from it). With `finish`, the event is that call's result: the call's end
        is recorded first, and only if its holder still holds it is the event queued (else
        `Sent(0)`: dropped)."""
        del rest
        ended = list[str]()
        with self._pipelined_write() as conn:
            sent = self._send_in(conn, run_id, event, now, planner, traceparent, finish, ended)
        if cancelled is not None:
            cancelled.extend(ended)
        return self._sent(sent)

    @retried
    def finish_calls(
        self,
        ends: Sequence[tuple[CallFinish, str, Mapping[str, Any]]],
        now: int,
        planner: StepPlanner[PlanT],
        cancelled: list[str] | None = None,
        rests: Mapping[str, RunRecord] | None = None,
    ) -> list[Sent[PlanT]]:
        """`send_and_step` with its `finish` for each (call end, run id, result event), all in
        one transaction (`Calls.finish_calls`); `rests` as `send_and_step`'s `rest`."""
        del rests
        ended, sent = list[str](), []
        with self._pipelined_write() as conn:
            for finish, run_id, event in ends:
                sent.append(self._send_in(conn, run_id, event, now, planner, None, finish, ended))
        if cancelled is not None:
            cancelled.extend(ended)
        return [self._sent(one) for one in sent]

    def _send_in(
        self,
        conn: Any,
        run_id: str,
        event: Mapping[str, Any],
        now: int,
        planner: StepPlanner[PlanT],
        traceparent: str | None,
        finish: CallFinish | None,
        ended: list[str],
    ) -> _Queued[PlanT] | None:
        """`send_and_step`'s work in the open transaction; None when `finish` was dropped."""
        rid = self._id(run_id)
        locked = self._exec(
            conn,
            f"SELECT {self.RUN_COLUMNS} FROM workflow_runs WHERE id = ?{self._LOCK_ROW}",
            (rid,),
        )
        if finish is not None and not self._finish_in(conn, finish, now):
            if not locked.fetchall():
                raise RunNotFoundError(f"no run with id {run_id!r}")
            return None
        queued = self._exec(
            conn,
            _QUEUE_EVENT,
            self._queued(rid, event, now, traceparent, None if finish is None else finish.key),
        )
        reads = [self._exec(conn, sql, params) for sql, params in self._work_queries([rid])]
        rows, inserted = locked.fetchall(), queued.fetchall()
        if not rows:
            raise RunNotFoundError(f"no run with id {run_id!r}")
        if not inserted:
            raise RunFinishedError(f"run {run_id} has ended ({self._run(rows[0]).status})")
        run = self._run(rows[0])
        work = self._work_of({rid: run.id}, [r.fetchall() for r in reads])[run.id]
        plan = planner.plan(run, work)
        commit = None if plan is None else plan.commit
        if commit is not None:
            check_status(commit.status)
        written = None if commit is None else self._commit_later_in(conn, commit, now, ended)
        due = commit is not None and (
            bool(commit.start_runs)
            or (commit.wake_at is not None and commit.wake_at <= now)
            or unowned_calls(commit.new_effects, commit.call_lease)
        )
        if commit is None or due:
            self._notify_in(conn, None if due else rid)
        return _Queued(int(inserted[0][0]), rid, plan, written, due)

    def _sent(self, sent: _Queued[PlanT] | None) -> Sent[PlanT]:
        """After `_send_in`'s transaction: what the send did, workers woken."""
        if sent is None:
            return Sent(0)
        version = None if sent.written is None else sent.written()
        if sent.plan is not None and version is None:  # (under the row lock it is written)
            with self._statement_write() as conn:
                self._notify_in(conn, sent.rid)
        if version is None:
            self.wakeup().notify(sent.rid)
        elif sent.due:
            self.wakeup().notify()
        return Sent(sent.inbox_id, version, sent.plan if version is not None else None)


def _lease_update(commit: StepCommit, t: Any) -> tuple[str, tuple[Any, ...]]:
    """SQL (and parameters) for the lease columns after a step."""
    if commit.release:
        return ", lease_owner = NULL, lease_expires_at = NULL, wake_at = ?", (t(commit.wake_at),)
    if commit.unleased:  # the claim folded into the commit
        lease = t(commit.lease_until)
        return (
            ", lease_owner = ?, lease_expires_at = ?, wake_at = ?, claim_count = claim_count + 1",
            (commit.owner, lease, lease),
        )
    if commit.lease_until is not None:
        lease = t(commit.lease_until)
        return ", lease_expires_at = ?, wake_at = ?", (lease, lease)
    return "", ()
