"""Calls beside their run in SQL (the `Calls` part of the store), written once for both dialects.

An invoked function or coroutine is a row of `workflow_calls`, inserted by the step that enters
its invoking state (`CALL` effects of `StepCommit.new_effects` and of a new run's first step).
A worker's call executor leases it (`claim_calls`), renews the lease while it runs
(`heartbeat_calls`) and records how it ended (`_finish_in`, in the transaction of
`send_and_step`, or of `finish_calls` for a burst of ends), queueing its result event in the
run's inbox in that same transaction, behind the events that arrived before it. The run is never
held meanwhile: its timers, events and cancels act while the call runs.

A call is stopped (`status = 'stopped'`) by the step that leaves its invoking state, and by every
end of its run (a final state, a failure, a cancel). A call stopped while it ran keeps its lease's
end: a limit's slot it holds counts until its executor sees it end (`stores/capacity.py`). A
stopped call's result is never queued: the fence of `_finish_in` is the row's status and lease,
under the row's lock, so a result racing the step that stops its call loses or is applied before
that step, never after it.

Every attempt is a row of `workflow_call_attempts`: opened by the claim that starts it, closed by
its end; an attempt left open by a crashed worker is closed as `lost` by the claim that takes the
call over (the same idempotency key, the next attempt).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from msgspec import structs

from persistence.stores.codec import Column, PayloadCodecError
from persistence.stores.conflicts import retried
from persistence.stores.dialect import SQLDialect
from persistence.stores.records import CallAttempt, CallEnd, CallFinish, CallRecord, NewEffect
from persistence.stores.rules import (
    STOPPED_BY_END,
    TRANSIENT_PREFIX,
    aged,
    idempotency_key,
    is_call,
    run_of_outbox_key,
)

_CALL_NAMES = (
    "idempotency_key, run_id{t}, step, call_id, payload, status, attempt, owner, "
    "lease_expires_at, available_at, details, error, created_at, updated_at, waiting_for"
)
_ATTEMPT_NAMES = (
    "idempotency_key, attempt, run_id{t}, worker, started_at, ended_at, outcome, "
    "error_name, message, traceback"
)
_OPEN = "status IN ('pending', 'running')"
"""A call that may still deliver a result."""


class SQLCalls(SQLDialect):
    """`Calls` in SQL, mixed into `sql.SQLStore` over its dialect hooks."""

    # -- written with a step -----------------------------------------------------------------
    def _insert_calls_in(
        self,
        conn: Any,
        run_id: str,
        step: int,
        effects: Sequence[NewEffect],
        now: int,
        lease: tuple[str, int] | None,
    ) -> None:
        """Record the step's calls (its `CALL` effects): due at once, or with `lease` (owner,
        until) already held by that executor, their first attempts open. A call is due as its
        run would be claimed (`available_at` aged by the run's priority, as `_CLAIM_ORDER`
        ages a run's `wake_at`): calls are claimed in `available_at` order, so a webhook's call
        goes before a backfill's recorded a little earlier, and a claim reads no run for it."""
        if not any(is_call(e) for e in effects):
            return
        rid, ts = self._id(run_id), self._t(now)
        owner, until = lease if lease is not None else (None, None)
        found = self._exec(
            conn, "SELECT priority FROM workflow_runs WHERE id = ?", (rid,)
        ).fetchone()
        due = self._t(aged(now, found[0] if found else None))
        for e in effects:
            if not is_call(e):
                continue
            key = idempotency_key(run_id, step, e.index)
            self._exec(
                conn,
                "INSERT INTO workflow_calls (idempotency_key, run_id, step, call_id, payload, "
                "status, attempt, owner, lease_expires_at, available_at, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    key,
                    rid,
                    step,
                    str(e.payload.get("id")),
                    self._seal(e.payload, rid, Column.CALL_PAYLOAD),
                    "pending" if owner is None else "running",
                    0 if owner is None else 1,
                    owner,
                    self._t(until),
                    due,
                    ts,
                    ts,
                ),
            )
            if owner is not None:
                self._exec(
                    conn,
                    "INSERT INTO workflow_call_attempts (idempotency_key, attempt, run_id, worker, "
                    "started_at) VALUES (?, 1, ?, ?, ?)",
                    (key, rid, owner, ts),
                )

    def _stop_calls_in(
        self,
        conn: Any,
        run_id: str,
        call_ids: Sequence[str] | None,
        before_step: int | None,
        now: int,
        why: str,
        drop: bool = False,
    ) -> None:
        """Stop the run's open calls (those of `call_ids` recorded before step `before_step`,
        or all): their running attempts end `stopped`, their results will be dropped; with
        `drop` (the run goes on), a result of theirs queued but not applied is dead-lettered
        (when the run ends, every queued event is, with the end's reason)."""
        rid, ts = self._id(run_id), self._t(now)
        where, params = f"run_id = ? AND {_OPEN}", list[Any]([rid])
        if call_ids is not None:
            if not call_ids:
                return
            where += f" AND call_id IN ({','.join('?' * len(call_ids))})"
            params += list(call_ids)
        if before_step is not None:
            where += " AND step < ?"
            params.append(before_step)
        self._exec(
            conn,
            "UPDATE workflow_call_attempts SET outcome = 'stopped', ended_at = ?, message = ? "
            "WHERE run_id = ? AND outcome IS NULL AND idempotency_key IN (SELECT "
            f"idempotency_key FROM workflow_calls WHERE {where})",
            (ts, why, rid, *params),
        )
        self._exec(
            conn,
            "UPDATE workflow_calls SET status = 'stopped', error = ?, owner = NULL, "
            "lease_expires_at = CASE WHEN status = 'running' THEN lease_expires_at END, "
            f"waiting_for = NULL, updated_at = ? WHERE {where}",
            (why, ts, *params),
        )
        if not drop:
            return
        done = where.replace(_OPEN, "status IN ('done', 'failed')")
        self._exec(  # a result queued but not applied yet answers a call left behind
            conn,
            "UPDATE workflow_inbox SET dead_at = ?, dead_reason = ? WHERE run_id = ? AND "
            "dead_at IS NULL AND call_key IN (SELECT idempotency_key FROM workflow_calls "
            f"WHERE {done})",
            (ts, f"the result of a call {why}", rid, *params),
        )

    def _reopen_calls_in(self, conn: Any, run_id: str, call_ids: Sequence[str], now: int) -> None:
        """A resumed run's calls again, due at once with the same keys: those of its last step
        that recorded a failed call (as the failed effects of its last failing step run
        again), and those its end stopped while they ran that its snapshot (`call_ids`, its
        children) still invokes."""
        ts, rid = self._t(now), self._id(run_id)
        again = (
            "(status = 'failed' AND step = (SELECT max(step) FROM workflow_calls c WHERE "
            "c.run_id = workflow_calls.run_id AND c.status = 'failed'))"
        )
        params: list[Any] = [ts, ts, rid]
        if call_ids:
            again += (
                f" OR (status = 'stopped' AND error = ? AND call_id IN "
                f"({','.join('?' * len(call_ids))}))"
            )
            params += [STOPPED_BY_END, *call_ids]
        self._exec(
            conn,
            "UPDATE workflow_calls SET status = 'pending', available_at = ?, owner = NULL, "
            f"lease_expires_at = NULL, error = NULL, updated_at = ? WHERE run_id = ? AND "
            f"({again})",
            params,
        )

    # -- the call executor's ------------------------------------------------------------------
    @retried
    def claim_calls(
        self, owner: str, now: int, lease_ms: int, limit: int, run_id: str | None = None
    ) -> list[CallRecord]:
        """Lease up to `limit` calls (of run `run_id` only, if given) that are due, or whose
        holder stopped renewing its lease (the attempt it left open is closed `lost`); each
        claim opens the next attempt, in `available_at` order (a new call's aged by its run's
        priority: `_insert_calls_in`). A call is not due while an effect its run recorded at
        or before its step is pending: a step's actions run before the calls it starts, as
        entry actions run before invoked actors start in memory."""
        ts, expires = self._t(now), self._t(now + lease_ms)
        # (with `run_id`, the effects' scan names it too: Citus routes a locking read to one
        # shard only when every table in it is filtered by its distribution column)
        one, params = ("run_id = ? AND ", [self._id(run_id)]) if run_id is not None else ("", [])
        effects_of_one = f"e.{one}" if one else ""
        with self._write() as conn:
            found = self._exec(
                conn,
                f"SELECT idempotency_key, status, attempt FROM workflow_calls WHERE {one}("
                f"(status = 'pending' AND available_at <= ? AND NOT EXISTS (SELECT 1 FROM "
                f"workflow_effects e WHERE {effects_of_one}e.run_id = workflow_calls.run_id AND "
                "e.status = 'pending' AND e.step <= workflow_calls.step)) OR "
                "(status = 'running' AND lease_expires_at <= ?)) "
                f"ORDER BY available_at, step, idempotency_key LIMIT ?{self._SKIP_LOCKED}",
                (*params, ts, *params, ts, limit),
            ).fetchall()
            if not found:
                return []
            for key, status, attempt in found:
                if status == "running":
                    self._exec(
                        conn,
                        "UPDATE workflow_call_attempts SET outcome = 'lost', ended_at = ?, "
                        "message = ? WHERE run_id = ? AND idempotency_key = ? AND attempt = ? AND "
                        "outcome IS NULL",
                        (
                            ts,
                            "its worker stopped renewing the call's lease",
                            self._id(run_of_outbox_key(key)),
                            key,
                            attempt,
                        ),
                    )
            keys = [row[0] for row in found]
            marks = ",".join("?" * len(keys))
            rows = self._exec(
                conn,
                "UPDATE workflow_calls SET status = 'running', owner = ?, lease_expires_at = ?, "
                f"attempt = attempt + 1, updated_at = ? WHERE idempotency_key IN ({marks}) "
                f"RETURNING {_CALL_NAMES.format(t=self._TEXT_ID)}",
                (owner, expires, ts, *keys),
            ).fetchall()
            self._exec(  # (one statement for the burst: a round trip per call cost seconds)
                conn,
                "INSERT INTO workflow_call_attempts (idempotency_key, attempt, run_id, worker, "
                "started_at) SELECT idempotency_key, attempt, run_id, ?, ? FROM workflow_calls "
                f"WHERE idempotency_key IN ({marks})",
                (owner, ts, *keys),
            )
        calls = [self._call(r) for r in rows]
        order = {key: i for i, key in enumerate(keys)}
        return sorted(calls, key=lambda c: order[c.idempotency_key])

    @retried
    def heartbeat_calls(
        self, owner: str, beats: Mapping[str, Any], now: int, lease_ms: int
    ) -> set[str]:
        """Renew `owner`'s leases of the calls keyed in `beats` (with each call's latest
        heartbeat details, None: unchanged); returns the keys it still holds: a call missing
        from the answer was stopped (or taken over) and must stop."""
        if not beats:
            return set()
        sealed = {key: self._sealed_details(key, details) for key, details in beats.items()}
        with self._write() as conn:
            return self._renew_calls_in(conn, owner, sealed, self._t(now), self._t(now + lease_ms))

    def _sealed_details(self, key: str, details: Any) -> Any:
        """Call `key`'s heartbeat details as their column's parameter (None: unchanged)."""
        if details is None:
            return None
        return self._seal(details, self._id(run_of_outbox_key(key)), Column.CALL_DETAILS)

    def _renew_calls_in(
        self, conn: Any, owner: str, sealed: Mapping[str, Any], ts: Any, expires: Any
    ) -> set[str]:
        """`heartbeat_calls`' renewals on `conn`, one call at a time (one writer at a time in
        SQLite: no lock to wait for; PostgreSQL's dialect renews them in one statement that
        waits for no row)."""
        kept: set[str] = set()
        for key, details in sealed.items():
            if self._exec(conn, *self._renewal(owner, key, details, ts, expires)).fetchall():
                kept.add(key)
        return kept

    def _renewal(
        self, owner: str, key: str, sealed: Any, ts: Any, expires: Any
    ) -> tuple[str, tuple[Any, ...]]:
        """The statement (and its parameters) that renews `owner`'s lease of call `key` until
        `expires` with its heartbeat details `sealed` (their column's parameter; None:
        unchanged); it returns a row if `owner` still holds the call."""
        run_id = self._id(run_of_outbox_key(key))
        return (
            "UPDATE workflow_calls SET lease_expires_at = ?, updated_at = ?, "
            "details = coalesce(?, details) WHERE run_id = ? AND idempotency_key = ? "
            "AND owner = ? AND status = 'running' RETURNING 1",
            (expires, ts, sealed, run_id, key, owner),
        )

    def _finish_in(self, conn: Any, finish: CallFinish, now: int) -> bool:
        """Record a call's end (`send_and_step`'s `finish`); False when its holder no longer
        holds it (stopped, or taken over after its lease expired): its result is dropped."""
        ts = self._t(now)
        rows = self._exec(
            conn,
            "UPDATE workflow_calls SET status = ?, owner = NULL, lease_expires_at = NULL, "
            "error = ?, updated_at = ? WHERE run_id = ? AND idempotency_key = ? AND owner = ? "
            "AND attempt = ? AND status = 'running' RETURNING 1",
            (
                finish.status,
                finish.end.message if finish.status == "failed" else None,
                ts,
                self._id(run_of_outbox_key(finish.key)),
                finish.key,
                finish.owner,
                finish.attempt,
            ),
        ).fetchall()
        self._end_attempt_in(conn, finish.key, finish.attempt, finish.end, ts)
        return bool(rows)

    @retried
    def retry_call(
        self, key: str, owner: str, attempt: int, now: int, at: int, end: CallEnd
    ) -> bool:
        """Give call `key` back to be attempted again at `at` (a transient failure, with the
        same idempotency key); False when `owner` no longer holds it."""
        ts = self._t(now)
        with self._write() as conn:
            rows = self._exec(
                conn,
                "UPDATE workflow_calls SET status = 'pending', owner = NULL, "
                "lease_expires_at = NULL, available_at = ?, error = ?, updated_at = ? "
                "WHERE run_id = ? AND idempotency_key = ? AND owner = ? AND attempt = ? AND "
                "status = 'running' RETURNING 1",
                (
                    self._t(at),
                    end.message,
                    ts,
                    self._id(run_of_outbox_key(key)),
                    key,
                    owner,
                    attempt,
                ),
            ).fetchall()
            self._end_attempt_in(conn, key, attempt, end, ts)
            if rows:
                self._note_run_in(conn, key, attempt, end)
        return bool(rows)

    @retried
    def note_call_failures(self, key: str, attempt: int, end: CallEnd) -> None:
        """Show on the call's run (`attempt_count`, `last_error`) that its call failed
        transiently `attempt` times (its last attempt's end), as a run waiting out a transient
        failure in its step shows it."""
        with self._write() as conn:
            self._note_run_in(conn, key, attempt, end)

    def _note_run_in(self, conn: Any, key: str, attempt: int, end: CallEnd) -> None:
        text = f"{TRANSIENT_PREFIX} (attempt {attempt}): {end.error_name}: {end.message}"
        self._exec(
            conn,
            "UPDATE workflow_runs SET attempt_count = ?, last_error = ? WHERE id = ? "
            "AND status = 'active'",
            (attempt, text, self._id(run_of_outbox_key(key))),
        )

    def _end_attempt_in(self, conn: Any, key: str, attempt: int, end: CallEnd, ts: Any) -> None:
        """Close an attempt still open (a stop may have closed it first: that outcome stays)."""
        self._exec(
            conn,
            "UPDATE workflow_call_attempts SET outcome = ?, ended_at = ?, error_name = ?, "
            "message = ?, traceback = ? WHERE run_id = ? AND idempotency_key = ? AND "
            "attempt = ? AND outcome IS NULL",
            (
                end.outcome,
                ts,
                end.error_name,
                end.message,
                end.traceback,
                self._id(run_of_outbox_key(key)),
                key,
                attempt,
            ),
        )

    # -- reading -----------------------------------------------------------------------------
    def list_calls(self, run_id: str) -> list[CallRecord]:
        """The run's calls, in the order they were recorded."""
        rows = self._read(
            f"SELECT {_CALL_NAMES.format(t=self._TEXT_ID)} FROM workflow_calls WHERE run_id = ? "
            "ORDER BY step, idempotency_key",
            (self._id(run_id),),
        )
        return [self._call(r) for r in rows]

    def call_attempts(self, run_id: str) -> list[CallAttempt]:
        """Every attempt of the run's calls, oldest first."""
        rows = self._read(
            f"SELECT {_ATTEMPT_NAMES.format(t=self._TEXT_ID)} FROM workflow_call_attempts "
            "WHERE run_id = ? ORDER BY started_at, idempotency_key, attempt",
            (self._id(run_id),),
        )
        return [
            CallAttempt(r[0], r[1], r[2], r[3], self._ms(r[4]), self._ms(r[5]), *r[6:])
            for r in rows
        ]

    def open_calls(self, run_ids: Collection[str]) -> dict[str, list[str]]:
        """The call ids of each run's calls that may still deliver a result."""
        ids = [self._id(i) for i in run_ids]
        if not ids:
            return {}
        rows = self._read(
            f"SELECT run_id{self._TEXT_ID}, call_id FROM workflow_calls WHERE run_id IN "
            f"({','.join('?' * len(ids))}) AND {_OPEN} ORDER BY step",
            ids,
        )
        found: dict[str, list[str]] = {}
        for run_id, call_id in rows:
            found.setdefault(run_id, []).append(call_id)
        return found

    def _call(self, row: Sequence[Any]) -> CallRecord:
        """A call row as a record; one whose payload does not open (a missing key) carries
        the `problem`, with harmless empty values."""
        values = list(row)
        problem = None
        try:
            values[4] = self._open(values[4], values[1], Column.CALL_PAYLOAD)
            values[10] = (
                None
                if values[10] is None
                else self._open(values[10], values[1], Column.CALL_DETAILS)
            )
        except PayloadCodecError as exc:
            problem, values[4], values[10] = str(exc), {}, None
        values[8], values[9] = self._ms(values[8]), self._ms(values[9])
        values[12], values[13] = self._ms(values[12]), self._ms(values[13])
        record = CallRecord(*values)
        return record if problem is None else structs.replace(record, problem=problem)
