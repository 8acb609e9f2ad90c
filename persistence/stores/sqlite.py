"""SQLite store: the embedded default (stdlib `sqlite3`, WAL journal, no server).

Every write is one `BEGIN IMMEDIATE` transaction, so writers from many threads and processes are
serialized by SQLite's file lock; readers never block thanks to WAL. One connection per store
object, guarded by a lock (sqlite3 connections are not safe to share without one).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from persistence import schema
from persistence.stores.base import (
    ACTIVE,
    CLAIMABLE,
    CLAIMABLE_BY_EVENT,
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
    StoreEncodingError,
    StoreError,
    StoreUnavailableError,
    VersionCount,
    cancel_event,
    check_distinct_runs,
    check_group_column,
    check_last,
    check_status,
    completion_times,
    ended_reason,
    idempotency_key,
    known_status,
    only_version,
    parse_run,
    run_query_sql,
)

RUN_COLUMNS = (
    "id, workflow_name, workflow_version, key, state, snapshot, status, attempt_count, "
    "created_at, updated_at, completed_at, failed_at, last_error, wake_at, lease_owner, "
    "lease_expires_at, version, claim_count, traceparent"
)
EFFECT_COLUMNS = (
    "idempotency_key, run_id, step, effect_index, kind, payload, status, result, error, "
    "created_at, updated_at"
)
_TRANSIENT = ("locked", "busy", "unable to open", "disk i/o", "readonly database")
_SYNCHRONOUS = ("off", "normal", "full", "extra")


def _dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError as exc:  # orjson.JSONEncodeError: a value no store holds exactly
        raise StoreEncodingError(f"cannot store value: {exc}") from exc


def _run(row: Sequence[Any], previous_owner: str | None = None,
         due_at: int | None = None) -> RunRecord:  # fmt: skip
    return parse_run(list(row), orjson.loads, previous_owner, due_at)


def _effect(row: Sequence[Any]) -> EffectRecord:
    values = list(row)
    values[5] = orjson.loads(values[5])
    values[7] = None if values[7] is None else orjson.loads(values[7])
    return EffectRecord(*values)


def _translate(exc: sqlite3.Error) -> StoreError:
    message = str(exc).lower()
    if isinstance(exc, sqlite3.OperationalError) and any(t in message for t in _TRANSIENT):
        return StoreUnavailableError(f"SQLite database unavailable: {exc}")
    return StoreError(f"SQLite error: {exc}")


class SQLiteStore:
    """Durable-run store in one SQLite file (`path`), WAL mode.

    `synchronous` is SQLite's durability setting: "full" (default) survives power loss, "normal"
    survives process crashes only and is faster.
    """

    dialect = "sqlite"

    def __init__(
        self, path: str | Path, synchronous: str = "full", busy_timeout_ms: int = 30_000
    ) -> None:
        if synchronous.lower() not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {_SYNCHRONOUS}, got {synchronous!r}")
        self.path = str(path)
        self.url = f"sqlite:///{self.path}"
        self._lock = threading.RLock()
        try:
            self._conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
            self._conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            self._conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:
            raise _translate(exc) from exc

    # -- plumbing ---------------------------------------------------------------------------
    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One `BEGIN IMMEDIATE` transaction; rolled back on any exception."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise _translate(exc) from exc
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException as exc:
                self._conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise _translate(exc) from exc
                if isinstance(exc, UnicodeEncodeError | OverflowError):
                    raise StoreEncodingError(f"cannot store value: {exc}") from exc
                raise

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise _translate(exc) from exc

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._conn.close()

    # -- schema -----------------------------------------------------------------------------
    def schema_version(self) -> int:
        """The applied schema version (0 if the database is empty)."""
        exists = self._read(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (schema.VERSION_TABLE,)
        )
        if not exists:
            return 0
        row = self._read(f"SELECT max(version) FROM {schema.VERSION_TABLE}")
        return int(row[0][0] or 0)

    def migrate(self) -> list[int]:
        """Apply missing migrations, each in its own transaction."""
        applied: list[int] = []
        with self._write() as conn:
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {schema.VERSION_TABLE} (version integer PRIMARY KEY,"
                " name text NOT NULL, applied_at text NOT NULL DEFAULT CURRENT_TIMESTAMP)"
            )
        for migration in schema.pending(self.dialect, self.schema_version()):
            with self._write() as conn:
                # executescript would COMMIT our transaction; run statement by statement instead.
                for statement in _statements(migration.sql):
                    conn.execute(statement)
                conn.execute(
                    f"INSERT INTO {schema.VERSION_TABLE} (version, name) VALUES (?, ?)",
                    (migration.version, migration.name),
                )
            applied.append(migration.version)
        return applied

    def check_schema(self) -> None:
        """Raise `SchemaVersionError` unless the schema is current."""
        schema.check_current(self.dialect, self.schema_version(), self.url)

    # -- runs -------------------------------------------------------------------------------
    def create_run(
        self, run: NewRun, effects: Sequence[NewEffect], now: int
    ) -> tuple[RunRecord, bool]:
        """Insert a run and its initial effects, or return the active run with the same key."""
        with self._write() as conn:
            return self._create_in(conn, run, effects, now)

    def _insert_effects(
        self,
        conn: sqlite3.Connection,
        run_id: str,
        step: int,
        effects: Sequence[NewEffect],
        now: int,
    ) -> None:
        conn.executemany(
            f"INSERT INTO workflow_effects ({EFFECT_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, 'pending', NULL, NULL, ?, ?)",
            [
                (
                    idempotency_key(run_id, step, e.index),
                    run_id,
                    step,
                    e.index,
                    e.kind,
                    _dumps(e.payload),
                    now,
                    now,
                )
                for e in effects
            ],
        )

    def get_run(self, run_id: str) -> RunRecord:
        """The run with this id."""
        rows = self._read(f"SELECT {RUN_COLUMNS} FROM workflow_runs WHERE id = ?", (run_id,))
        if not rows:
            raise RunNotFoundError(f"no run with id {run_id!r}")
        return _run(rows[0])

    def find_run(self, workflow_name: str, key: str) -> RunRecord | None:
        """The active run with this start key."""
        rows = self._read(
            f"SELECT {RUN_COLUMNS} FROM workflow_runs WHERE workflow_name = ? AND key = ? "
            "AND status = 'active'",
            (workflow_name, key),
        )
        return _run(rows[0]) if rows else None

    def list_runs(
        self,
        status: str | None = None,
        workflow_name: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[RunRecord]:
        """Runs newest first, filtered."""
        where, params = _filters(status, workflow_name)
        rows = self._read(
            f"SELECT {RUN_COLUMNS} FROM workflow_runs {where} "
            "ORDER BY created_at DESC, id LIMIT ? OFFSET ?",
            (*params, limit, offset),
        )
        return [_run(r) for r in rows]

    def count_runs(self) -> dict[str, int]:
        """Runs per status."""
        rows = self._read("SELECT status, count(*) FROM workflow_runs GROUP BY status")
        return {status: int(n) for status, n in rows}

    def search_runs(self, query: RunQuery, limit: int = 50, offset: int = 0) -> list[RunRecord]:
        """Runs matching `query`, newest first."""
        where, params = run_query_sql(query, "?", int)
        # Page through rowids first (from an index alone), then read only the page's rows.
        order = "ORDER BY created_at DESC, rowid DESC"
        rows = self._read(
            f"SELECT {RUN_COLUMNS} FROM workflow_runs WHERE rowid IN (SELECT rowid FROM "
            f"workflow_runs {where} {order} LIMIT ? OFFSET ?) {order}",
            (*params, limit, offset),
        )
        return [_run(r) for r in rows]

    def count_matching(self, query: RunQuery) -> dict[str, int]:
        """Runs matching `query`, per status."""
        where, params = run_query_sql(query, "?", int)
        status = known_status(query)
        if status is not None:
            n = int(self._read(f"SELECT count(*) FROM workflow_runs {where}", params)[0][0])
            return {status: n} if n else {}
        # With a state filter, `+status` keeps SQLite on the state index (group after filtering)
        # instead of walking the listing index in status order and reading every row.
        group = "+status" if query.state is not None else "status"
        rows = self._read(f"SELECT status, count(*) FROM workflow_runs {where} GROUP BY {group}",
                          params)  # fmt: skip
        return {status: int(n) for status, n in rows}

    def run_groups(
        self, column: str, workflow_name: str | None = None
    ) -> list[tuple[str, str, int]]:
        """(value, status, runs) per group of runs."""
        check_group_column(column)
        where, params = run_query_sql(RunQuery(workflow_name=workflow_name), "?", int)
        rows = self._read(
            f"SELECT {column}, status, count(*) FROM workflow_runs {where} "
            f"GROUP BY {column}, status ORDER BY {column}, status",
            params,
        )
        return [(value, status, int(n)) for value, status, n in rows]

    def cancel_run(self, run_id: str, now: int, reason: str | None = None) -> str:
        """Cancel directly if no live lease, else queue a cancel event for the holder."""
        with self._write() as conn:
            rows = conn.execute(
                "SELECT status, lease_owner, lease_expires_at, state, version FROM workflow_runs "
                "WHERE id = ?",
                (run_id,),
            ).fetchall()
            if not rows:
                raise RunNotFoundError(f"no run with id {run_id!r}")
            status, owner, expires, state, version = rows[0]
            if status != ACTIVE:
                return "finished"
            if owner is not None and expires is not None and expires > now:
                conn.execute(
                    "INSERT INTO workflow_inbox (run_id, event, created_at) VALUES (?, ?, ?)",
                    (run_id, _dumps(cancel_event(reason)), now),
                )
                return "requested"
            conn.execute(
                "UPDATE workflow_runs SET status = 'cancelled', completed_at = ?, updated_at = ?, "
                "last_error = coalesce(?, last_error), wake_at = NULL, lease_owner = NULL, "
                "lease_expires_at = NULL, version = version + 1 WHERE id = ?",
                (now, now, reason, run_id),
            )
            conn.execute(
                "UPDATE workflow_effects SET status = 'skipped', result = ?, updated_at = ? "
                "WHERE run_id = ? AND status = 'pending'",
                (_dumps("cancelled"), now, run_id),
            )
            _dead_letter(conn, run_id, "cancelled", now)
            _journal_one(conn, run_id, version + 1, cancel_event(reason), state, now)
            return "cancelled"

    # -- inbox ------------------------------------------------------------------------------
    def send_event(self, run_id: str, event: Mapping[str, Any], now: int, *,
                   traceparent: str | None = None) -> int:
        """Queue an event for an active run."""
        with self._write() as conn:
            rows = conn.execute(
                "SELECT status FROM workflow_runs WHERE id = ?", (run_id,)
            ).fetchall()
            if not rows:
                raise RunNotFoundError(f"no run with id {run_id!r}")
            if rows[0][0] != ACTIVE:
                raise RunFinishedError(f"run {run_id} has ended ({rows[0][0]})")
            cursor = conn.execute(
                "INSERT INTO workflow_inbox (run_id, event, created_at, traceparent) "
                "VALUES (?, ?, ?, ?)",
                (run_id, _dumps(dict(event)), now, traceparent),
            )
            return int(cursor.lastrowid or 0)

    def pending_events(self, run_id: str) -> list[InboxEvent]:
        """Queued events, oldest first."""
        rows = self._read(
            "SELECT id, run_id, event, created_at, traceparent FROM workflow_inbox "
            "WHERE run_id = ? AND dead_at IS NULL ORDER BY id",
            (run_id,),
        )
        return [InboxEvent(i, r, orjson.loads(e), c, t) for i, r, e, c, t in rows]

    # -- leases and steps -------------------------------------------------------------------
    def claim_runs(
        self,
        owner: str,
        now: int,
        lease_ms: int,
        limit: int,
        versions: Collection[tuple[str, str]] | None = None,
    ) -> list[RunRecord]:
        """Lease runs that are due or have queued events."""
        if versions is not None and not versions:
            return []
        version_sql, version_params = _version_filter(versions)
        free = "(lease_owner IS NULL OR lease_expires_at <= ?)"
        due = CLAIMABLE.format(now="?", free=free)
        asked = CLAIMABLE_BY_EVENT.format(free=free)
        expires = now + lease_ms
        with self._write() as conn:
            found = conn.execute(
                f"SELECT id, lease_owner, wake_at FROM (SELECT id, lease_owner, wake_at FROM "
                f"workflow_runs WHERE {due} {version_sql} ORDER BY wake_at LIMIT ?) UNION "
                f"SELECT id, lease_owner, wake_at FROM (SELECT id, lease_owner, wake_at FROM "
                f"workflow_runs WHERE id "
                f"IN (SELECT run_id FROM workflow_inbox WHERE dead_at IS NULL) AND {asked} "
                f"{version_sql} LIMIT ?) LIMIT ?",
                (now, now, *version_params, limit, now, *version_params, limit, limit),
            ).fetchall()
            if not found:
                return []
            previous = {run_id: (owner, wake) for run_id, owner, wake in found}
            marks = ",".join("?" * len(found))
            rows = conn.execute(
                "UPDATE workflow_runs SET lease_owner = ?, lease_expires_at = ?, wake_at = ?, "
                f"claim_count = claim_count + 1 WHERE id IN ({marks}) RETURNING {RUN_COLUMNS}",
                (owner, expires, expires, *previous),
            ).fetchall()
            claimed = [_run(r, *previous[r[0]]) for r in rows]
            for run in claimed:
                if run.problem is not None:  # never stepped, never claimed again
                    self._fail_in(conn, run.id, owner, run.problem, now, (), ())
        return [run for run in claimed if run.problem is None]

    def heartbeat(self, owner: str, run_ids: Collection[str], now: int, lease_ms: int) -> set[str]:
        """Extend the caller's leases."""
        if not run_ids:
            return set()
        marks = ",".join("?" * len(run_ids))
        expires = now + lease_ms
        with self._write() as conn:
            rows = conn.execute(
                "UPDATE workflow_runs SET lease_expires_at = ?, wake_at = ? "
                f"WHERE lease_owner = ? AND id IN ({marks}) RETURNING id",
                (expires, expires, owner, *run_ids),
            ).fetchall()
        return {r[0] for r in rows}

    def release(self, run_id: str, owner: str, wake_at: int | None, *,
                attempt_count: int | None = None, last_error: str | None = None) -> bool:
        """Give up a lease without stepping."""
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE workflow_runs SET lease_owner = NULL, lease_expires_at = NULL, "
                "wake_at = CASE WHEN status = 'active' OR EXISTS (SELECT 1 FROM workflow_effects "
                "e WHERE e.run_id = workflow_runs.id AND e.status = 'pending') THEN ? END, "
                "attempt_count = coalesce(?, attempt_count), last_error = coalesce(?, last_error)"
                " WHERE id = ? AND lease_owner = ?",
                (wake_at, attempt_count, last_error, run_id, owner),
            )
            return cursor.rowcount == 1

    def fail_run(self, run_id: str, owner: str, reason: str, now: int, *,
                 outcomes: Sequence[EffectOutcome] = (),
                 start_runs: Sequence[tuple[NewRun, Sequence[NewEffect]]] = ()) -> bool:
        """End a leased run as `error` without rewriting its snapshot."""
        with self._write() as conn:
            return self._fail_in(conn, run_id, owner, reason, now, outcomes, start_runs)

    def _fail_in(self, conn: sqlite3.Connection, run_id: str, owner: str, reason: str, now: int,
                 outcomes: Sequence[EffectOutcome],
                 start_runs: Sequence[tuple[NewRun, Sequence[NewEffect]]]) -> bool:  # fmt: skip
        rows = conn.execute(
            "UPDATE workflow_runs SET status = 'error', last_error = ?, updated_at = ?, "
            "completed_at = ?, failed_at = ?, wake_at = NULL, lease_owner = NULL, "
            "lease_expires_at = NULL, version = CAST(version AS integer) + 1 "
            "WHERE id = ? AND lease_owner = ? RETURNING version, state",
            (reason, now, now, now, run_id, owner),
        ).fetchall()
        if not rows:
            return False
        version, state = rows[0]
        conn.executemany(
            "UPDATE workflow_effects SET status = ?, result = NULL, error = ?, updated_at = ? "
            "WHERE idempotency_key = ? AND run_id = ? AND status = 'pending'",
            [(o.status, o.error, now, o.idempotency_key, run_id) for o in outcomes],
        )
        _dead_letter(conn, run_id, "error", now)
        _journal_one(conn, run_id, version, {"type": FAILED_EVENT, "reason": reason}, str(state),
                     now)  # fmt: skip
        for run, run_effects in start_runs:
            self._create_in(conn, run, run_effects, now)
        return True

    def resume_run(self, run_id: str, expected_version: int, snapshot: Mapping[str, Any],
                   state: str, now: int) -> RunRecord:
        """Make a failed run active again (see `Store.resume_run`)."""
        with self._write() as conn:
            rows = conn.execute(
                "UPDATE workflow_runs SET status = 'active', snapshot = ?, state = ?, "
                "updated_at = ?, completed_at = NULL, failed_at = NULL, wake_at = ?, "
                "lease_owner = NULL, lease_expires_at = NULL, attempt_count = 0, "
                "version = version + 1 WHERE id = ? AND status = 'error' AND version = ? "
                f"RETURNING {RUN_COLUMNS}",
                (_dumps(dict(snapshot)), state, now, now, run_id, expected_version),
            ).fetchall()
            if not rows:
                raise RunFinishedError(f"run {run_id} is not failed at version "
                                       f"{expected_version}; not resumed")  # fmt: skip
            run = _run(rows[0])
            conn.execute(
                "UPDATE workflow_effects SET status = 'pending', result = NULL, error = NULL, "
                "updated_at = ? WHERE run_id = ? AND status = 'failed' AND step = (SELECT "
                "max(step) FROM workflow_effects WHERE run_id = ? AND status = 'failed')",
                (now, run_id, run_id),
            )
            _journal_one(conn, run_id, run.version, {"type": RESUME_EVENT}, state, now)
            return run

    def dead_letters(self, run_id: str) -> list[DeadLetter]:
        """Events of the run that can no longer be applied, oldest first."""
        rows = self._read(
            "SELECT id, run_id, event, created_at, dead_at, dead_reason FROM workflow_inbox "
            "WHERE run_id = ? AND dead_at IS NOT NULL ORDER BY id",
            (run_id,),
        )
        return [DeadLetter(i, r, orjson.loads(e), c, d, why) for i, r, e, c, d, why in rows]

    def sweep_dead_letters(self, now: int) -> list[DeadLetter]:
        """Live events of ended runs become dead letters."""
        with self._write() as conn:
            rows = conn.execute(
                "UPDATE workflow_inbox SET dead_at = ?, dead_reason = 'the run ended (' || "
                "(SELECT status FROM workflow_runs r WHERE r.id = workflow_inbox.run_id) || "
                "') before this event was applied' WHERE dead_at IS NULL AND run_id IN "
                "(SELECT id FROM workflow_runs WHERE status <> 'active') "
                "RETURNING id, run_id, event, created_at, dead_at, dead_reason",
                (now,),
            ).fetchall()
        return [DeadLetter(i, r, orjson.loads(e), c, d, why) for i, r, e, c, d, why in rows]

    def commit_step(self, commit: StepCommit, now: int) -> int:
        """Write one step atomically; `ConflictError` if the lease or version moved."""
        return only_version(self.commit_steps([commit], now), commit)

    def commit_steps(self, commits: Sequence[StepCommit], now: int) -> list[int | None]:
        """Write several runs' steps in one transaction; each under a savepoint, so a step
        whose lease or version moved writes nothing (None) and the others are kept."""
        check_distinct_runs(commits)
        for commit in commits:
            check_status(commit.status)
        versions: list[int | None] = []
        with self._write() as conn:
            for commit in commits:
                conn.execute("SAVEPOINT step")
                try:
                    versions.append(self._commit_in(conn, commit, now))
                except (ConflictError, sqlite3.IntegrityError):
                    conn.execute("ROLLBACK TO step")
                    versions.append(None)
                conn.execute("RELEASE step")
        return versions

    def _commit_in(self, conn: sqlite3.Connection, commit: StepCommit, now: int) -> int:
        """Write `commit` in the open transaction; `ConflictError` if it must not be."""
        completed_at, failed_at = completion_times(commit.status, now)
        new_version = commit.expected_version + 1
        lease_sql, lease_params = _lease_update(commit)
        cursor = conn.execute(
            "UPDATE workflow_runs SET state = ?, snapshot = ?, status = ?, "
            "attempt_count = coalesce(?, attempt_count), last_error = coalesce(?, last_error),"
            " workflow_version = coalesce(?, workflow_version),"
            " updated_at = ?, completed_at = coalesce(completed_at, ?), "
            f"failed_at = coalesce(failed_at, ?), version = ?{lease_sql} "
            "WHERE id = ? AND version = ? AND lease_owner = ?",
            (
                commit.state,
                _dumps(commit.snapshot),
                commit.status,
                commit.attempt_count,
                commit.last_error,
                commit.workflow_version,
                now,
                completed_at,
                failed_at,
                new_version,
                *lease_params,
                commit.run_id,
                commit.expected_version,
                commit.owner,
            ),
        )
        if cursor.rowcount != 1:
            raise ConflictError(
                f"run {commit.run_id}: not at version {commit.expected_version} under lease "
                f"of {commit.owner!r}; step not written"
            )
        for outcome in commit.effect_outcomes:
            done = conn.execute(
                "UPDATE workflow_effects SET status = ?, result = ?, error = ?, updated_at = ? "
                "WHERE idempotency_key = ? AND run_id = ? AND status = 'pending'",
                (
                    outcome.status,
                    _dumps(outcome.result),
                    outcome.error,
                    now,
                    outcome.idempotency_key,
                    commit.run_id,
                ),
            )
            if done.rowcount != 1:
                raise ConflictError(
                    f"effect {outcome.idempotency_key} is not pending; step not written"
                )
        self._insert_effects(conn, commit.run_id, new_version, commit.new_effects, now)
        if commit.consumed_inbox:
            marks = ",".join("?" * len(commit.consumed_inbox))
            conn.execute(
                f"DELETE FROM workflow_inbox WHERE run_id = ? AND id IN ({marks})",
                (commit.run_id, *commit.consumed_inbox),
            )
        if commit.status != ACTIVE:
            _dead_letter(conn, commit.run_id, commit.status, now)
        for run, run_effects in commit.start_runs:
            self._create_in(conn, run, run_effects, now)
        conn.executemany(
            "INSERT INTO workflow_events (run_id, step, event, state_before, state_after, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?)",
            [
                (
                    commit.run_id,
                    new_version,
                    _dumps(j.event),
                    j.state_before,
                    j.state_after,
                    now,
                )
                for j in commit.journal
            ],
        )
        return new_version

    # -- effects and journal ----------------------------------------------------------------
    def list_effects(
        self, run_id: str, status: str | None = None, *, last: int | None = None
    ) -> list[EffectRecord]:
        """Outbox rows of a run in (step, index) order (the newest `last` of them)."""
        check_last(last)
        sql = f"SELECT {EFFECT_COLUMNS} FROM workflow_effects WHERE run_id = ?"
        params: tuple[Any, ...] = (run_id,)
        if status is not None:
            sql += " AND status = ?"
            params += (status,)
        sql += " ORDER BY step DESC, effect_index DESC LIMIT ?"
        rows = self._read(sql, (*params, -1 if last is None else last))
        return [_effect(r) for r in reversed(rows)]

    def list_events(self, run_id: str, *, last: int | None = None) -> list[EventRecord]:
        """Journal rows of a run, oldest first (the newest `last` of them)."""
        check_last(last)
        rows = self._read(
            "SELECT id, run_id, step, event, state_before, state_after, created_at "
            "FROM workflow_events WHERE run_id = ? ORDER BY id DESC LIMIT ?",
            (run_id, -1 if last is None else last),
        )
        return [EventRecord(i, r, s, orjson.loads(e), b, a, c)
                for i, r, s, e, b, a, c in reversed(rows)]  # fmt: skip

    def count_events(self, run_id: str) -> int:
        """Journal rows of a run."""
        return int(self._read("SELECT count(*) FROM workflow_events WHERE run_id = ?",
                              (run_id,))[0][0])  # fmt: skip

    def pending_work(self, run_ids: Collection[str]) -> dict[str, PendingWork]:
        """Pending effects and queued events of each run."""
        with self._lock:
            return {i: PendingWork(self.list_effects(i, "pending"), self.pending_events(i))
                    for i in run_ids}  # fmt: skip

    # -- reports ----------------------------------------------------------------------------
    def stuck_runs(self, now: int, older_than_ms: int, limit: int = 100) -> list[RunRecord]:
        """Active runs untouched for `older_than_ms`, not waiting for a later timer."""
        rows = self._read(
            f"SELECT {RUN_COLUMNS} FROM workflow_runs WHERE status = 'active' AND updated_at < ? "
            "AND (wake_at IS NULL OR wake_at < ?) ORDER BY updated_at LIMIT ?",
            (now - older_than_ms, now - older_than_ms, limit),
        )
        return [_run(r) for r in rows]

    def unknown_versions(self, known: Collection[tuple[str, str]]) -> list[VersionCount]:
        """Active runs grouped by versions not in `known`."""
        rows = self._read(
            "SELECT workflow_name, workflow_version, count(*), CASE WHEN json_valid(snapshot) THEN "
            "json_extract(snapshot, '$.version') END"
            " FROM workflow_runs WHERE status = 'active' GROUP BY 1, 2, 4 ORDER BY 1, 2, 4"
        )
        wanted = set(known)
        return [VersionCount(n, v, int(c), lb) for n, v, c, lb in rows if (n, v) not in wanted]

    # -- helper tables ----------------------------------------------------------------------
    def try_claim(
        self, name: str, owner: str, now: int, stale_after_ms: int, run_id: str | None = None
    ) -> bool:
        """Take or refresh the claim `name`."""
        with self._write() as conn:
            rows = conn.execute(
                "INSERT INTO workflow_claims (name, owner, run_id, claimed_at, expires_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, "
                "run_id = excluded.run_id, claimed_at = excluded.claimed_at, "
                "expires_at = excluded.expires_at "
                "WHERE workflow_claims.owner = excluded.owner OR workflow_claims.expires_at <= ? "
                "RETURNING name",
                (name, owner, run_id, now, now + stale_after_ms, now),
            ).fetchall()
        return bool(rows)

    def release_claim(self, name: str, owner: str) -> bool:
        """Drop our claim."""
        with self._write() as conn:
            cursor = conn.execute(
                "DELETE FROM workflow_claims WHERE name = ? AND owner = ?", (name, owner)
            )
        return cursor.rowcount == 1

    def get_claim(self, name: str) -> ClaimRecord | None:
        """The current claim record."""
        rows = self._read(
            "SELECT name, owner, run_id, claimed_at, expires_at FROM workflow_claims "
            "WHERE name = ?",
            (name,),
        )
        return ClaimRecord(*rows[0]) if rows else None

    def get_breaker(self, name: str) -> BreakerRecord | None:
        """Stored breaker state."""
        rows = self._read(
            "SELECT name, state, failure_count, opened_at, data, updated_at, version "
            "FROM workflow_breakers WHERE name = ?",
            (name,),
        )
        if not rows:
            return None
        n, s, f, o, d, u, v = rows[0]
        return BreakerRecord(n, s, f, o, orjson.loads(d), u, v)

    def put_breaker(self, record: BreakerRecord, expected_version: int, now: int) -> bool:
        """Compare-and-set breaker state."""
        values = (record.state, record.failure_count, record.opened_at, _dumps(record.data), now)
        with self._write() as conn:
            if expected_version == 0:
                cursor = conn.execute(
                    "INSERT INTO workflow_breakers (state, failure_count, opened_at, data, "
                    "updated_at, name, version) VALUES (?, ?, ?, ?, ?, ?, 1) "
                    "ON CONFLICT (name) DO NOTHING",
                    (*values, record.name),
                )
            else:
                cursor = conn.execute(
                    "UPDATE workflow_breakers SET state = ?, failure_count = ?, opened_at = ?, "
                    "data = ?, updated_at = ?, version = version + 1 "
                    "WHERE name = ? AND version = ?",
                    (*values, record.name, expected_version),
                )
        return cursor.rowcount == 1

    def get_schedule(self, name: str) -> ScheduleRecord | None:
        """Stored schedule state."""
        rows = self._read(
            "SELECT name, last_fire_at, version FROM workflow_schedules WHERE name = ?", (name,)
        )
        return ScheduleRecord(*rows[0]) if rows else None

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
        try:
            with self._write() as conn:
                if expected_version == 0:
                    cursor = conn.execute(
                        "INSERT INTO workflow_schedules (name, last_fire_at, version) "
                        "VALUES (?, ?, 1) ON CONFLICT (name) DO NOTHING",
                        (name, fire_at),
                    )
                else:
                    cursor = conn.execute(
                        "UPDATE workflow_schedules SET last_fire_at = ?, version = version + 1"
                        " WHERE name = ? AND version = ?",
                        (fire_at, name, expected_version),
                    )
                if cursor.rowcount != 1:
                    raise _ScheduleMoved
                # Nested BEGIN is not allowed: reuse the open transaction for the run.
                record, _ = self._create_in(conn, run, effects, now)
                return record
        except _ScheduleMoved:
            return None

    def _create_in(
        self, conn: sqlite3.Connection, run: NewRun, effects: Sequence[NewEffect], now: int
    ) -> tuple[RunRecord, bool]:
        check_status(run.status)
        completed_at, failed_at = completion_times(run.status, now)
        rows = conn.execute(
            f"INSERT INTO workflow_runs ({RUN_COLUMNS}) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, 1, 0, ?) "
            "ON CONFLICT (workflow_name, key) WHERE status = 'active' AND key IS NOT NULL "
            f"DO NOTHING RETURNING {RUN_COLUMNS}",
            (
                run.id,
                run.workflow_name,
                run.workflow_version,
                run.key,
                run.state,
                _dumps(run.snapshot),
                run.status,
                run.attempt_count,
                now,
                now,
                completed_at,
                failed_at,
                run.last_error,
                run.wake_at,
                run.traceparent,
            ),
        ).fetchall()
        if rows:
            self._insert_effects(conn, run.id, 1, effects, now)
            return _run(rows[0]), True
        existing = conn.execute(
            f"SELECT {RUN_COLUMNS} FROM workflow_runs WHERE workflow_name = ? AND key = ? "
            "AND status = 'active'",
            (run.workflow_name, run.key),
        ).fetchall()
        return _run(existing[0]), False


class _ScheduleMoved(Exception):
    """Internal: the schedule's version moved; roll the transaction back."""


def _journal_one(conn: sqlite3.Connection, run_id: str, step: int, event: Mapping[str, Any],
                 state: str, now: int) -> None:
    """Journal an event the store applied itself (cancel, failure, resume): the state stays."""
    conn.execute(
        "INSERT INTO workflow_events (run_id, step, event, state_before, state_after, "
        "created_at) VALUES (?, ?, ?, ?, ?, ?)",
        (run_id, step, _dumps(dict(event)), state, state, now),
    )


def _dead_letter(conn: sqlite3.Connection, run_id: str, status: str, now: int) -> None:
    """The run's still-queued events become dead letters: it ended in `status`."""
    conn.execute(
        "UPDATE workflow_inbox SET dead_at = ?, dead_reason = ? "
        "WHERE run_id = ? AND dead_at IS NULL",
        (now, ended_reason(status), run_id),
    )


def _lease_update(commit: StepCommit) -> tuple[str, tuple[Any, ...]]:
    """SQL (and parameters) for the lease columns after a step."""
    if commit.release:
        return ", lease_owner = NULL, lease_expires_at = NULL, wake_at = ?", (commit.wake_at,)
    if commit.lease_until is not None:
        return ", lease_expires_at = ?, wake_at = ?", (commit.lease_until, commit.lease_until)
    return "", ()


def _filters(status: str | None, workflow_name: str | None) -> tuple[str, tuple[Any, ...]]:
    clauses: list[str] = []
    params: list[Any] = []
    if status is not None:
        clauses.append("status = ?")
        params.append(status)
    if workflow_name is not None:
        clauses.append("workflow_name = ?")
        params.append(workflow_name)
    return ("WHERE " + " AND ".join(clauses) if clauses else ""), tuple(params)


def _version_filter(versions: Collection[tuple[str, str]] | None) -> tuple[str, tuple[str, ...]]:
    if versions is None:
        return "", ()
    pairs = sorted(set(versions))
    marks = ",".join("(?, ?)" for _ in pairs)
    return (
        f"AND (workflow_name, workflow_version) IN (VALUES {marks})",
        tuple(x for pair in pairs for x in pair),
    )


def _statements(sql: str) -> list[str]:
    """Split a migration file into statements (our files have no `;` inside literals)."""
    lines = [line.split("--", 1)[0] for line in sql.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
