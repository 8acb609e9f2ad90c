"""PostgreSQL store: psycopg 3 with a psycopg-pool connection pool, `jsonb` snapshots.

Hot paths are single SQL statements (data-modifying CTEs) run in autocommit mode, so a worker's
round of steps, one step of each run it holds, costs one round trip and one commit. Claims use
`FOR UPDATE SKIP LOCKED`, so many workers on many machines share the table without blocking each
other.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

import orjson
import psycopg
import psycopg_pool
from psycopg.types.json import Jsonb, set_json_dumps, set_json_loads

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
    known_status,
    only_version,
    parse_run,
    run_query_sql,
)

RUN_COLUMNS = (
    "id::text, workflow_name, workflow_version, key, state, snapshot, status, attempt_count, "
    "created_at, updated_at, completed_at, failed_at, last_error, wake_at, lease_owner, "
    "lease_expires_at, version, claim_count, traceparent"
)
_RUN_TIME_FIELDS = (8, 9, 10, 11, 13, 15)
EFFECT_COLUMNS = (
    "idempotency_key, run_id::text, step, effect_index, kind, payload, status, result, error, "
    "created_at, updated_at"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def to_ts(ms: int | None) -> datetime | None:
    """Epoch milliseconds to an aware datetime (exact)."""
    return None if ms is None else _EPOCH + ms * _MS


def to_ms(ts: datetime | None) -> int | None:
    """An aware datetime to epoch milliseconds (exact to the millisecond)."""
    return None if ts is None else (ts - _EPOCH) // _MS


def _run(row: Sequence[Any], previous_owner: str | None = None,
         due_at: int | None = None) -> RunRecord:  # fmt: skip
    values = list(row)
    for i in _RUN_TIME_FIELDS:
        values[i] = to_ms(values[i])
    return parse_run(values, None, previous_owner, due_at)


def _effect(row: Sequence[Any]) -> EffectRecord:
    values = list(row)
    values[9], values[10] = to_ms(values[9]), to_ms(values[10])
    return EffectRecord(*values)


def _json(value: Any) -> Jsonb:
    return Jsonb(value)


def _dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError as exc:  # orjson.JSONEncodeError: a value no store holds exactly
        raise StoreEncodingError(f"cannot store value: {exc}") from exc


def _loads(data: bytes | str) -> Any:
    """orjson, or the standard parser for what orjson refuses (integers beyond 64 bits put
    there by hand): a row must always read, so that it can be listed and failed."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def _configure(conn: psycopg.Connection[Any]) -> None:
    set_json_dumps(_dumps, conn)
    set_json_loads(_loads, conn)


class PostgresStore:
    """Durable-run store in PostgreSQL.

    `dsn` is a libpq connection string or URL; pass `pool` instead to share an existing
    `psycopg_pool.ConnectionPool` (its connections must be in autocommit mode). `schema` puts the
    tables in that schema (created if missing) via `search_path`, e.g. to isolate tests.
    """

    dialect = "postgres"

    def __init__(
        self,
        dsn: str | None = None,
        *,
        pool: psycopg_pool.ConnectionPool[Any] | None = None,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 8,
        connect_timeout_s: float = 10.0,
    ) -> None:
        if (dsn is None) == (pool is None):
            raise ValueError("PostgresStore needs exactly one of dsn= or pool=")
        if schema is not None and not _SCHEMA_NAME.match(schema):
            raise ValueError(f"schema name must match {_SCHEMA_NAME.pattern}: {schema!r}")
        self.schema = schema
        kwargs: dict[str, Any] = {"autocommit": True}
        if schema is not None:
            kwargs["options"] = f"-c search_path={schema}"
        if pool is None:
            assert dsn is not None
            self.url = redact(dsn)
            if schema is not None:
                _create_schema(dsn, schema)
            self._pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
                dsn,
                kwargs=kwargs,
                configure=_configure,
                min_size=min_size,
                max_size=max_size,
                timeout=connect_timeout_s,
                open=True,
            )
            self._owns_pool = True
        else:
            self.url = "postgresql://(pool)"
            self._pool = pool
            self._owns_pool = False

    # -- plumbing ---------------------------------------------------------------------------
    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; connection trouble becomes `StoreUnavailableError`."""
        try:
            with self._pool.connection() as conn:
                if not self._owns_pool:
                    _configure(conn)
                yield conn
        except psycopg.errors.UniqueViolation as exc:
            raise ConflictError(f"duplicate record: {exc.diag.message_detail or exc}") from exc
        except psycopg.DataError as exc:  # NUL in text, bad Unicode, number out of range
            raise StoreEncodingError(f"PostgreSQL cannot store a value: {exc}") from exc
        except (UnicodeEncodeError, OverflowError) as exc:
            raise StoreEncodingError(f"cannot store value: {exc}") from exc
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            raise StoreUnavailableError(f"PostgreSQL unavailable: {exc}") from exc
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL error: {exc}") from exc

    def _rows(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> list[Any]:
        with self._conn() as conn:
            return conn.execute(sql, params).fetchall()

    def close(self) -> None:
        """Close the pool if this store created it."""
        if self._owns_pool:
            self._pool.close()

    # -- schema -----------------------------------------------------------------------------
    def schema_version(self) -> int:
        """The applied schema version (0 if the database is empty)."""
        rows = self._rows("SELECT to_regclass(%s) IS NOT NULL", (schema.VERSION_TABLE,))
        if not rows[0][0]:
            return 0
        rows = self._rows(f"SELECT coalesce(max(version), 0) FROM {schema.VERSION_TABLE}")
        return int(rows[0][0])

    def migrate(self) -> list[int]:
        """Apply missing migrations in one transaction, serialized by an advisory lock."""
        applied: list[int] = []
        with self._conn() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('statecharts_schema'))")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {schema.VERSION_TABLE} (version integer PRIMARY KEY,"
                " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            row = conn.execute(
                f"SELECT coalesce(max(version), 0) FROM {schema.VERSION_TABLE}"
            ).fetchone()
            for migration in schema.pending(self.dialect, int(row[0] if row else 0)):
                conn.execute(migration.sql.encode())
                conn.execute(
                    f"INSERT INTO {schema.VERSION_TABLE} (version, name) VALUES (%s, %s)",
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
        check_status(run.status)
        with self._conn() as conn:
            return self._create_in(conn, run, effects, now)

    def _create_in(
        self,
        conn: psycopg.Connection[Any],
        run: NewRun,
        effects: Sequence[NewEffect],
        now: int,
    ) -> tuple[RunRecord, bool]:
        completed_at, failed_at = completion_times(run.status, now)
        params = {
            "id": run.id, "name": run.workflow_name, "wv": run.workflow_version, "key": run.key,
            "state": run.state, "snapshot": _json(run.snapshot), "status": run.status,
            "attempts": run.attempt_count, "now": to_ts(now), "completed": to_ts(completed_at),
            "failed": to_ts(failed_at), "last_error": run.last_error, "wake": to_ts(run.wake_at),
            "effects": _json(_effect_rows(effects)), "traceparent": run.traceparent,
        }  # fmt: skip
        # A racing insert of the same key makes ON CONFLICT skip while our snapshot cannot yet
        # see the winner; the second attempt sees it.
        for _ in range(3):
            row = conn.execute(_CREATE_RUN, params).fetchone()
            if row is not None:
                return _run(row[:-1]), bool(row[-1])
        raise ConflictError(f"could not insert or find run with key {run.key!r}")

    def get_run(self, run_id: str) -> RunRecord:
        """The run with this id."""
        rows = self._rows(
            f"SELECT {RUN_COLUMNS} FROM workflow_runs WHERE id = %s", (_uuid(run_id),)
        )
        if not rows:
            raise RunNotFoundError(f"no run with id {run_id!r}")
        return _run(rows[0])

    def find_run(self, workflow_name: str, key: str) -> RunRecord | None:
        """The active run with this start key."""
        rows = self._rows(
            f"SELECT {RUN_COLUMNS} FROM workflow_runs WHERE workflow_name = %s AND key = %s "
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
        rows = self._rows(
            f"SELECT {RUN_COLUMNS} FROM workflow_runs "
            "WHERE (%(status)s::text IS NULL OR status = %(status)s) "
            "AND (%(name)s::text IS NULL OR workflow_name = %(name)s) "
            "ORDER BY created_at DESC, id LIMIT %(limit)s OFFSET %(offset)s",
            {"status": status, "name": workflow_name, "limit": limit, "offset": offset},
        )
        return [_run(r) for r in rows]

    def count_runs(self) -> dict[str, int]:
        """Runs per status."""
        rows = self._rows("SELECT status, count(*) FROM workflow_runs GROUP BY status")
        return {status: int(n) for status, n in rows}

    def search_runs(self, query: RunQuery, limit: int = 50, offset: int = 0) -> list[RunRecord]:
        """Runs matching `query`, newest first."""
        where, params = run_query_sql(query, "%s", to_ts)
        rows = self._rows(
            f"SELECT {RUN_COLUMNS} FROM workflow_runs {where} "
            "ORDER BY created_at DESC, id LIMIT %s OFFSET %s",
            (*params, limit, offset),
        )
        return [_run(r) for r in rows]

    def count_matching(self, query: RunQuery) -> dict[str, int]:
        """Runs matching `query`, per status."""
        where, params = run_query_sql(query, "%s", to_ts)
        status = known_status(query)
        if status is not None:
            n = int(self._rows(f"SELECT count(*) FROM workflow_runs {where}", params)[0][0])
            return {status: n} if n else {}
        rows = self._rows(f"SELECT status, count(*) FROM workflow_runs {where} GROUP BY status",
                          params)  # fmt: skip
        return {status: int(n) for status, n in rows}

    def run_groups(
        self, column: str, workflow_name: str | None = None
    ) -> list[tuple[str, str, int]]:
        """(value, status, runs) per group of runs."""
        check_group_column(column)
        where, params = run_query_sql(RunQuery(workflow_name=workflow_name), "%s", to_ts)
        rows = self._rows(
            f"SELECT {column}, status, count(*) FROM workflow_runs {where} "
            f"GROUP BY {column}, status ORDER BY {column}, status",
            params,
        )
        return [(value, status, int(n)) for value, status, n in rows]

    def cancel_run(self, run_id: str, now: int, reason: str | None = None) -> str:
        """Cancel directly if no live lease, else queue a cancel event for the holder."""
        ts = to_ts(now)
        with self._conn() as conn, conn.transaction():
            row = conn.execute(
                "SELECT status, lease_owner, lease_expires_at, state, version FROM workflow_runs "
                "WHERE id = %s FOR UPDATE",
                (_uuid(run_id),),
            ).fetchone()
            if row is None:
                raise RunNotFoundError(f"no run with id {run_id!r}")
            status, owner, expires, state, version = row
            if status != "active":
                return "finished"
            if owner is not None and expires is not None and expires > ts:
                conn.execute(
                    "INSERT INTO workflow_inbox (run_id, event, created_at) VALUES (%s, %s, %s)",
                    (run_id, _json(cancel_event(reason)), ts),
                )
                return "requested"
            conn.execute(
                "UPDATE workflow_runs SET status = 'cancelled', completed_at = %(now)s, "
                "updated_at = %(now)s, last_error = coalesce(%(reason)s, last_error), "
                "wake_at = NULL, lease_owner = NULL, lease_expires_at = NULL, "
                "version = version + 1 WHERE id = %(id)s",
                {"now": ts, "reason": reason, "id": run_id},
            )
            conn.execute(
                "UPDATE workflow_effects SET status = 'skipped', result = %s, updated_at = %s "
                "WHERE run_id = %s AND status = 'pending'",
                (_json("cancelled"), ts, run_id),
            )
            _dead_letter(conn, run_id, "cancelled", ts)
            _journal_one(conn, run_id, version + 1, cancel_event(reason), state, ts)
            return "cancelled"

    # -- inbox ------------------------------------------------------------------------------
    def send_event(self, run_id: str, event: Mapping[str, Any], now: int, *,
                   traceparent: str | None = None) -> int:
        """Queue an event for an active run."""
        row = self._rows(
            "WITH target AS (SELECT id, status FROM workflow_runs WHERE id = %(id)s), "
            "ins AS (INSERT INTO workflow_inbox (run_id, event, created_at, traceparent) "
            "SELECT id, %(event)s, %(now)s, %(tp)s FROM target WHERE status = 'active' "
            "RETURNING id) SELECT (SELECT status FROM target), (SELECT id FROM ins)",
            {"id": _uuid(run_id), "event": _json(dict(event)), "now": to_ts(now),
             "tp": traceparent},
        )[0]
        status, inbox_id = row
        if status is None:
            raise RunNotFoundError(f"no run with id {run_id!r}")
        if inbox_id is None:
            raise RunFinishedError(f"run {run_id} has ended ({status})")
        return int(inbox_id)

    def pending_events(self, run_id: str) -> list[InboxEvent]:
        """Queued events, oldest first."""
        rows = self._rows(
            "SELECT id, run_id::text, event, created_at, traceparent FROM workflow_inbox "
            "WHERE run_id = %s AND dead_at IS NULL ORDER BY id",
            (_uuid(run_id),),
        )
        return [InboxEvent(i, r, e, to_ms(c) or 0, t) for i, r, e, c, t in rows]

    # -- leases and steps -------------------------------------------------------------------
    def claim_runs(
        self,
        owner: str,
        now: int,
        lease_ms: int,
        limit: int,
        versions: Collection[tuple[str, str]] | None = None,
    ) -> list[RunRecord]:
        """Lease due runs and runs with queued events, skipping rows other workers lock."""
        if versions is not None and not versions:
            return []
        pairs = sorted(set(versions)) if versions is not None else []
        version_sql = (
            "AND (workflow_name, workflow_version) IN "
            "(SELECT * FROM unnest(%(names)s::text[], %(versions)s::text[]))"
            if versions is not None
            else ""
        )
        free = "(lease_owner IS NULL OR lease_expires_at <= %(now)s)"
        due = CLAIMABLE.format(now="%(now)s", free=free)
        asked = CLAIMABLE_BY_EVENT.format(free=free)
        sql = (
            f"WITH due AS (SELECT id, lease_owner, wake_at FROM workflow_runs WHERE {due} "
            f"{version_sql} ORDER BY wake_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED), "
            # the inbox's run ids as one array: an index probe per id, whatever the planner
            # guesses of the (often empty, never analysed) inbox
            "asked AS (SELECT id, lease_owner, wake_at FROM workflow_runs WHERE id = "
            "ANY(ARRAY(SELECT "
            f"DISTINCT run_id FROM workflow_inbox WHERE dead_at IS NULL)) AND {asked} "
            f"{version_sql} LIMIT %(limit)s FOR UPDATE SKIP LOCKED), "
            "picked AS (SELECT id, lease_owner, wake_at FROM due UNION SELECT id, lease_owner, "
            "wake_at FROM asked LIMIT %(limit)s) "
            "UPDATE workflow_runs r SET lease_owner = %(owner)s, lease_expires_at = %(exp)s, "
            "wake_at = %(exp)s, claim_count = r.claim_count + 1 FROM picked "
            "WHERE r.id = picked.id RETURNING "
            + RUN_COLUMNS.replace("id::text", "r.id::text").replace("lease_owner", "r.lease_owner")
            .replace("wake_at", "r.wake_at")
            + ", picked.lease_owner, picked.wake_at"
        )
        rows = self._rows(
            sql,
            {
                "now": to_ts(now), "exp": to_ts(now + lease_ms), "limit": limit, "owner": owner,
                "names": [n for n, _ in pairs], "versions": [v for _, v in pairs],
            },
        )  # fmt: skip
        claimed = [_run(r[:-2], r[-2], to_ms(r[-1])) for r in rows]
        for run in claimed:
            if run.problem is not None:  # never stepped, never claimed again
                self.fail_run(run.id, owner, run.problem, now)
        return [run for run in claimed if run.problem is None]

    def heartbeat(self, owner: str, run_ids: Collection[str], now: int, lease_ms: int) -> set[str]:
        """Extend the caller's leases."""
        if not run_ids:
            return set()
        rows = self._rows(
            "UPDATE workflow_runs SET lease_expires_at = %(exp)s, wake_at = %(exp)s "
            "WHERE lease_owner = %(owner)s AND id = ANY(%(ids)s::uuid[]) RETURNING id::text",
            {"exp": to_ts(now + lease_ms), "owner": owner, "ids": [_uuid(i) for i in run_ids]},
        )
        return {r[0] for r in rows}

    def release(self, run_id: str, owner: str, wake_at: int | None, *,
                attempt_count: int | None = None, last_error: str | None = None) -> bool:
        """Give up a lease without stepping."""
        rows = self._rows(
            "UPDATE workflow_runs SET lease_owner = NULL, lease_expires_at = NULL, "
            "wake_at = CASE WHEN status = 'active' OR EXISTS (SELECT 1 FROM workflow_effects e "
            "WHERE e.run_id = workflow_runs.id AND e.status = 'pending') THEN %(wake)s END, "
            "attempt_count = coalesce(%(attempts)s, attempt_count), "
            "last_error = coalesce(%(error)s, last_error) "
            "WHERE id = %(id)s AND lease_owner = %(owner)s RETURNING 1",
            {"wake": to_ts(wake_at), "id": _uuid(run_id), "owner": owner,
             "attempts": attempt_count, "error": last_error},
        )  # fmt: skip
        return bool(rows)

    def fail_run(self, run_id: str, owner: str, reason: str, now: int, *,
                 outcomes: Sequence[EffectOutcome] = (),
                 start_runs: Sequence[tuple[NewRun, Sequence[NewEffect]]] = ()) -> bool:
        """End a leased run as `error` without rewriting its snapshot."""
        ts = to_ts(now)
        with self._conn() as conn, conn.transaction():
            row = conn.execute(
                "UPDATE workflow_runs SET status = 'error', last_error = %(reason)s, "
                "updated_at = %(now)s, completed_at = %(now)s, failed_at = %(now)s, "
                "wake_at = NULL, lease_owner = NULL, lease_expires_at = NULL, "
                "version = version + 1 WHERE id = %(id)s AND lease_owner = %(owner)s "
                "RETURNING version, state",
                {"reason": reason, "now": ts, "id": _uuid(run_id), "owner": owner},
            ).fetchone()
            if row is None:
                return False
            version, state = row
            for o in outcomes:
                conn.execute(
                    "UPDATE workflow_effects SET status = %s, result = NULL, error = %s, "
                    "updated_at = %s WHERE idempotency_key = %s AND run_id = %s "
                    "AND status = 'pending'",
                    (o.status, o.error, ts, o.idempotency_key, _uuid(run_id)),
                )
            _dead_letter(conn, run_id, "error", ts)
            _journal_one(conn, run_id, version, {"type": FAILED_EVENT, "reason": reason}, state, ts)
            for run, run_effects in start_runs:
                check_status(run.status)
                self._create_in(conn, run, run_effects, now)
            return True

    def resume_run(self, run_id: str, expected_version: int, snapshot: Mapping[str, Any],
                   state: str, now: int) -> RunRecord:
        """Make a failed run active again (see `Store.resume_run`)."""
        ts, rid = to_ts(now), _uuid(run_id)
        with self._conn() as conn, conn.transaction():
            row = conn.execute(
                "UPDATE workflow_runs SET status = 'active', snapshot = %(snapshot)s, "
                "state = %(state)s, updated_at = %(now)s, completed_at = NULL, failed_at = NULL,"
                " wake_at = %(now)s, lease_owner = NULL, lease_expires_at = NULL, "
                "attempt_count = 0, version = version + 1 WHERE id = %(id)s AND status = 'error'"
                f" AND version = %(expected)s RETURNING {RUN_COLUMNS}",
                {"snapshot": _json(dict(snapshot)), "state": state, "now": ts, "id": rid,
                 "expected": expected_version},
            ).fetchone()  # fmt: skip
            if row is None:
                raise RunFinishedError(f"run {run_id} is not failed at version "
                                       f"{expected_version}; not resumed")  # fmt: skip
            run = _run(row)
            conn.execute(
                "UPDATE workflow_effects SET status = 'pending', result = NULL, error = NULL, "
                "updated_at = %(now)s WHERE run_id = %(id)s AND status = 'failed' AND step = "
                "(SELECT max(step) FROM workflow_effects WHERE run_id = %(id)s "
                "AND status = 'failed')",
                {"now": ts, "id": rid},
            )
            _journal_one(conn, run_id, run.version, {"type": RESUME_EVENT}, state, ts)
            return run

    def dead_letters(self, run_id: str) -> list[DeadLetter]:
        """Events of the run that can no longer be applied, oldest first."""
        rows = self._rows(
            "SELECT id, run_id::text, event, created_at, dead_at, dead_reason FROM workflow_inbox"
            " WHERE run_id = %s AND dead_at IS NOT NULL ORDER BY id",
            (_uuid(run_id),),
        )
        return [DeadLetter(i, r, e, to_ms(c) or 0, to_ms(d) or 0, why)
                for i, r, e, c, d, why in rows]  # fmt: skip

    def sweep_dead_letters(self, now: int) -> list[DeadLetter]:
        """Live events of ended runs become dead letters."""
        rows = self._rows(
            "UPDATE workflow_inbox i SET dead_at = %s, dead_reason = 'the run ended (' || "
            "r.status || ') before this event was applied' FROM workflow_runs r "
            "WHERE r.id = i.run_id AND r.status <> 'active' AND i.dead_at IS NULL "
            "RETURNING i.id, i.run_id::text, i.event, i.created_at, i.dead_at, i.dead_reason",
            (to_ts(now),),
        )
        return [DeadLetter(i, r, e, to_ms(c) or 0, to_ms(d) or 0, why)
                for i, r, e, c, d, why in rows]  # fmt: skip

    def commit_step(self, commit: StepCommit, now: int) -> int:
        """Write one step atomically; `ConflictError` if the lease or version moved."""
        return only_version(self.commit_steps([commit], now), commit)

    def commit_steps(self, commits: Sequence[StepCommit], now: int) -> list[int | None]:
        """Write several runs' steps in one statement (one round trip, one commit): each row is
        written only under its lease and version, and its outbox, inbox and journal rows only
        with it, so a step that lost its run writes nothing (None) and the others are kept."""
        check_distinct_runs(commits)
        ids = [_uuid(commit.run_id) for commit in commits]
        for commit in commits:
            check_status(commit.status)
        if not commits:
            return []
        params = {**_steps_params(commits, now), "ids": ids}
        present = {"outcomes": params["outcomes"].obj, "effects": params["effects"].obj,
                   "inbox": params["inbox"].obj, "journal": params["journal"].obj,
                   "dead": params["dead"].obj}  # fmt: skip
        sql = _steps_sql(tuple(name for name, rows in present.items() if rows))
        starts = [c for c in commits if c.start_runs]
        with self._conn() as conn:
            if not starts:  # the hot path: one statement, autocommit
                written = dict(conn.execute(sql, params).fetchall())
            else:
                with conn.transaction():
                    written = dict(conn.execute(sql, params).fetchall())
                    for commit in starts:
                        if _uuid(commit.run_id) in written:  # (rare: a run failed)
                            for run, run_effects in commit.start_runs:
                                check_status(run.status)
                                self._create_in(conn, run, run_effects, now)
        return [written.get(run_id) for run_id in ids]

    # -- effects and journal ----------------------------------------------------------------
    def list_effects(
        self, run_id: str, status: str | None = None, *, last: int | None = None
    ) -> list[EffectRecord]:
        """Outbox rows of a run in (step, index) order (the newest `last` of them)."""
        check_last(last)
        rows = self._rows(
            f"SELECT {EFFECT_COLUMNS} FROM workflow_effects WHERE run_id = %(id)s "
            "AND (%(status)s::text IS NULL OR status = %(status)s) "
            "ORDER BY step DESC, effect_index DESC LIMIT %(last)s",
            {"id": _uuid(run_id), "status": status, "last": last},
        )
        return [_effect(r) for r in reversed(rows)]

    def list_events(self, run_id: str, *, last: int | None = None) -> list[EventRecord]:
        """Journal rows of a run, oldest first (the newest `last` of them)."""
        check_last(last)
        rows = self._rows(
            "SELECT id, run_id::text, step, event, state_before, state_after, created_at "
            "FROM workflow_events WHERE run_id = %s ORDER BY id DESC LIMIT %s",
            (_uuid(run_id), last),
        )
        return [EventRecord(i, r, s, e, b, a, to_ms(c) or 0)
                for i, r, s, e, b, a, c in reversed(rows)]  # fmt: skip

    def count_events(self, run_id: str) -> int:
        """Journal rows of a run."""
        rows = self._rows("SELECT count(*) FROM workflow_events WHERE run_id = %s",
                          (_uuid(run_id),))  # fmt: skip
        return int(rows[0][0])

    def pending_work(self, run_ids: Collection[str]) -> dict[str, PendingWork]:
        """Pending effects and queued events of each run, both queries in one round trip."""
        ids = {_uuid(i): i for i in run_ids}
        params = {"ids": list(ids)}
        with self._conn() as conn:
            with conn.pipeline():
                effects = conn.execute(
                    f"SELECT {EFFECT_COLUMNS} FROM workflow_effects WHERE run_id = ANY(%(ids)s"
                    "::uuid[]) AND status = 'pending' ORDER BY run_id, step, effect_index",
                    params,
                )
                inbox = conn.execute(
                    "SELECT id, run_id::text, event, created_at, traceparent FROM workflow_inbox "
                    "WHERE run_id = ANY(%(ids)s::uuid[]) AND dead_at IS NULL ORDER BY id",
                    params,
                )
            effect_rows, inbox_rows = effects.fetchall(), inbox.fetchall()
        work = {canonical: PendingWork([], []) for canonical in ids}
        for row in effect_rows:
            work[row[1]].effects.append(_effect(row))
        for i, r, e, c, t in inbox_rows:
            work[r].inbox.append(InboxEvent(i, r, e, to_ms(c) or 0, t))
        return {given: work[canonical] for canonical, given in ids.items()}

    # -- reports ----------------------------------------------------------------------------
    def stuck_runs(self, now: int, older_than_ms: int, limit: int = 100) -> list[RunRecord]:
        """Active runs untouched for `older_than_ms`, not waiting for a later timer."""
        rows = self._rows(
            f"SELECT {RUN_COLUMNS} FROM workflow_runs WHERE status = 'active' "
            "AND updated_at < %(cutoff)s AND (wake_at IS NULL OR wake_at < %(cutoff)s) "
            "ORDER BY updated_at LIMIT %(limit)s",
            {"cutoff": to_ts(now - older_than_ms), "limit": limit},
        )
        return [_run(r) for r in rows]

    def unknown_versions(self, known: Collection[tuple[str, str]]) -> list[VersionCount]:
        """Active runs grouped by versions not in `known`."""
        rows = self._rows(
            "SELECT workflow_name, workflow_version, count(*), snapshot->>'version' "
            "FROM workflow_runs WHERE status = 'active' GROUP BY 1, 2, 4 ORDER BY 1, 2, 4"
        )
        wanted = set(known)
        return [VersionCount(n, v, int(c), lb) for n, v, c, lb in rows if (n, v) not in wanted]

    # -- helper tables ----------------------------------------------------------------------
    def try_claim(
        self, name: str, owner: str, now: int, stale_after_ms: int, run_id: str | None = None
    ) -> bool:
        """Take or refresh the claim `name`."""
        rows = self._rows(
            "INSERT INTO workflow_claims (name, owner, run_id, claimed_at, expires_at) "
            "VALUES (%(name)s, %(owner)s, %(run)s, %(now)s, %(exp)s) ON CONFLICT (name) DO UPDATE "
            "SET owner = excluded.owner, run_id = excluded.run_id, "
            "claimed_at = excluded.claimed_at, expires_at = excluded.expires_at "
            "WHERE workflow_claims.owner = excluded.owner OR workflow_claims.expires_at <= %(now)s"
            " RETURNING name",
            {
                "name": name, "owner": owner, "run": None if run_id is None else _uuid(run_id),
                "now": to_ts(now), "exp": to_ts(now + stale_after_ms),
            },
        )  # fmt: skip
        return bool(rows)

    def release_claim(self, name: str, owner: str) -> bool:
        """Drop our claim."""
        rows = self._rows(
            "DELETE FROM workflow_claims WHERE name = %s AND owner = %s RETURNING 1", (name, owner)
        )
        return bool(rows)

    def get_claim(self, name: str) -> ClaimRecord | None:
        """The current claim record."""
        rows = self._rows(
            "SELECT name, owner, run_id::text, claimed_at, expires_at FROM workflow_claims "
            "WHERE name = %s",
            (name,),
        )
        if not rows:
            return None
        n, o, r, c, e = rows[0]
        return ClaimRecord(n, o, r, to_ms(c) or 0, to_ms(e) or 0)

    def get_breaker(self, name: str) -> BreakerRecord | None:
        """Stored breaker state."""
        rows = self._rows(
            "SELECT name, state, failure_count, opened_at, data, updated_at, version "
            "FROM workflow_breakers WHERE name = %s",
            (name,),
        )
        if not rows:
            return None
        n, s, f, o, d, u, v = rows[0]
        return BreakerRecord(n, s, f, to_ms(o), d, to_ms(u) or 0, v)

    def put_breaker(self, record: BreakerRecord, expected_version: int, now: int) -> bool:
        """Compare-and-set breaker state."""
        params = {
            "name": record.name, "state": record.state, "failures": record.failure_count,
            "opened": to_ts(record.opened_at), "data": _json(record.data), "now": to_ts(now),
            "expected": expected_version,
        }  # fmt: skip
        if expected_version == 0:
            sql = (
                "INSERT INTO workflow_breakers (name, state, failure_count, opened_at, data, "
                "updated_at, version) VALUES (%(name)s, %(state)s, %(failures)s, %(opened)s, "
                "%(data)s, %(now)s, 1) ON CONFLICT (name) DO NOTHING RETURNING 1"
            )
        else:
            sql = (
                "UPDATE workflow_breakers SET state = %(state)s, failure_count = %(failures)s, "
                "opened_at = %(opened)s, data = %(data)s, updated_at = %(now)s, "
                "version = version + 1 WHERE name = %(name)s AND version = %(expected)s RETURNING 1"
            )
        return bool(self._rows(sql, params))

    def get_schedule(self, name: str) -> ScheduleRecord | None:
        """Stored schedule state."""
        rows = self._rows(
            "SELECT name, last_fire_at, version FROM workflow_schedules WHERE name = %s", (name,)
        )
        if not rows:
            return None
        n, last, v = rows[0]
        return ScheduleRecord(n, to_ms(last), v)

    def fire_schedule(
        self,
        name: str,
        expected_version: int,
        fire_at: int,
        run: NewRun,
        effects: Sequence[NewEffect],
        now: int,
    ) -> RunRecord | None:
        """Advance the schedule and create its run, in one transaction."""
        check_status(run.status)
        params = {"name": name, "fire": to_ts(fire_at), "expected": expected_version}
        with self._conn() as conn, conn.transaction():
            if expected_version == 0:
                moved = conn.execute(
                    "INSERT INTO workflow_schedules (name, last_fire_at, version) "
                    "VALUES (%(name)s, %(fire)s, 1) ON CONFLICT (name) DO NOTHING RETURNING 1",
                    params,
                ).fetchone()
            else:
                moved = conn.execute(
                    "UPDATE workflow_schedules SET last_fire_at = %(fire)s, version = version + 1"
                    " WHERE name = %(name)s AND version = %(expected)s RETURNING 1",
                    params,
                ).fetchone()
            if moved is None:
                return None
            record, _ = self._create_in(conn, run, effects, now)
            return record


_CREATE_RUN = f"""
WITH ins AS (
    INSERT INTO workflow_runs ({RUN_COLUMNS.replace("id::text", "id")})
    VALUES (%(id)s, %(name)s, %(wv)s, %(key)s, %(state)s, %(snapshot)s, %(status)s,
            %(attempts)s, %(now)s, %(now)s, %(completed)s, %(failed)s, %(last_error)s, %(wake)s,
            NULL, NULL, 1, 0, %(traceparent)s)
    ON CONFLICT (workflow_name, key) WHERE status = 'active' AND key IS NOT NULL DO NOTHING
    RETURNING *
), effects AS (
    INSERT INTO workflow_effects (idempotency_key, run_id, step, effect_index, kind, payload,
                                  status, created_at, updated_at)
    SELECT ins.id::text || ':1:' || n.i, ins.id, 1, n.i, n.kind, n.payload, 'pending',
           %(now)s, %(now)s
    FROM ins, jsonb_to_recordset(%(effects)s) AS n(i integer, kind text, payload jsonb)
)
SELECT {RUN_COLUMNS}, true FROM ins
UNION ALL
SELECT {RUN_COLUMNS}, false FROM workflow_runs
WHERE workflow_name = %(name)s AND key = %(key)s AND status = 'active'
  AND NOT EXISTS (SELECT 1 FROM ins)
"""

def _ts(column: str) -> str:
    """SQL for a millisecond epoch (bigint, from JSON) as timestamptz, exactly."""
    return f"('epoch'::timestamptz + {column} * interval '1 millisecond')"


_STEPS_RUNS = f"""
WITH b AS (
    SELECT * FROM jsonb_to_recordset(%(steps)s) AS b(
        id uuid, expected bigint, owner text, state text, snapshot jsonb, status text,
        attempts integer, last_error text, wv text, completed bigint, failed bigint,
        release boolean, lease bigint, wake bigint, outcome_keys text[])
), run AS (
    UPDATE workflow_runs r SET state = b.state, snapshot = b.snapshot, status = b.status,
        attempt_count = coalesce(b.attempts, r.attempt_count),
        last_error = coalesce(b.last_error, r.last_error), updated_at = %(now)s,
        workflow_version = coalesce(b.wv, r.workflow_version),
        completed_at = coalesce(r.completed_at, {_ts("b.completed")}),
        failed_at = coalesce(r.failed_at, {_ts("b.failed")}), version = b.expected + 1,
        lease_owner = CASE WHEN b.release THEN NULL ELSE r.lease_owner END,
        lease_expires_at = CASE WHEN b.release THEN NULL
                                ELSE coalesce({_ts("b.lease")}, r.lease_expires_at) END,
        wake_at = CASE WHEN b.release THEN {_ts("b.wake")}
                       ELSE coalesce({_ts("b.lease")}, r.wake_at) END
    FROM b
    WHERE r.id = ANY(%(ids)s::uuid[])  -- the planner sees the batch size: index, never seq scan
      AND r.id = b.id AND r.version = b.expected AND r.lease_owner = b.owner
      AND (cardinality(b.outcome_keys) = 0
           OR (SELECT count(*) FROM workflow_effects e
               WHERE e.run_id = b.id AND e.status = 'pending'
                 AND e.idempotency_key = ANY(b.outcome_keys)) = cardinality(b.outcome_keys))
    RETURNING r.id, r.version
)"""
_STEPS_PARTS = {
    "outcomes": """, outcomes AS (
    UPDATE workflow_effects e SET status = o.s, result = o.r, error = o.e, updated_at = %(now)s
    FROM run JOIN jsonb_to_recordset(%(outcomes)s) AS o(run uuid, k text, s text, r jsonb, e text)
        ON o.run = run.id
    WHERE e.idempotency_key = o.k AND e.run_id = run.id
)""",
    "effects": """, effects AS (
    INSERT INTO workflow_effects (idempotency_key, run_id, step, effect_index, kind, payload,
                                  status, created_at, updated_at)
    SELECT run.id::text || ':' || run.version || ':' || n.i, run.id, run.version, n.i, n.kind,
           n.payload, 'pending', %(now)s, %(now)s
    FROM run JOIN jsonb_to_recordset(%(effects)s) AS n(run uuid, i integer, kind text,
                                                        payload jsonb) ON n.run = run.id
)""",
    "inbox": """, consumed AS (
    DELETE FROM workflow_inbox i USING run, jsonb_to_recordset(%(inbox)s) AS c(run uuid, id bigint)
    WHERE c.run = run.id AND i.run_id = run.id AND i.id = c.id
)""",
    "dead": """, dead AS (
    UPDATE workflow_inbox i SET dead_at = %(now)s, dead_reason = d.reason
    FROM run JOIN jsonb_to_recordset(%(dead)s) AS d(run uuid, reason text, keep bigint[])
        ON d.run = run.id
    WHERE i.run_id = run.id AND i.dead_at IS NULL AND NOT (i.id = ANY(d.keep))
)""",
    "journal": """, journal AS (
    INSERT INTO workflow_events (run_id, step, event, state_before, state_after, created_at)
    SELECT run.id, run.version, j.event, j.before, j.after, %(now)s
    FROM run JOIN jsonb_to_recordset(%(journal)s) AS j(run uuid, n integer, event jsonb,
                                                        before text, after text) ON j.run = run.id
    ORDER BY j.n
)""",
}


@lru_cache(maxsize=32)
def _steps_sql(parts: tuple[str, ...]) -> str:
    """The one statement that commits a batch of steps, with only the parts it needs (fewer
    sub-statements to plan and run on the hot path)."""
    return (_STEPS_RUNS + "".join(_STEPS_PARTS[p] for p in parts)
            + "\nSELECT id::text, version FROM run")


def _steps_params(commits: Sequence[StepCommit], now: int) -> dict[str, Any]:
    """The batch as JSON row sets, one per table the statement writes."""
    steps: list[dict[str, Any]] = []
    outcomes: list[dict[str, Any]] = []
    effects: list[dict[str, Any]] = []
    inbox: list[dict[str, Any]] = []
    journal: list[dict[str, Any]] = []
    dead: list[dict[str, Any]] = []
    for c in commits:
        completed_at, failed_at = completion_times(c.status, now)
        steps.append({
            "id": c.run_id, "expected": c.expected_version, "owner": c.owner, "state": c.state,
            "snapshot": c.snapshot, "status": c.status, "attempts": c.attempt_count,
            "last_error": c.last_error, "wv": c.workflow_version, "completed": completed_at,
            "failed": failed_at, "release": c.release, "lease": c.lease_until, "wake": c.wake_at,
            "outcome_keys": [o.idempotency_key for o in c.effect_outcomes],
        })  # fmt: skip
        outcomes += [{"run": c.run_id, "k": o.idempotency_key, "s": o.status, "r": o.result,
                      "e": o.error} for o in c.effect_outcomes]  # fmt: skip
        effects += [{"run": c.run_id, "i": e.index, "kind": e.kind, "payload": e.payload}
                    for e in c.new_effects]  # fmt: skip
        inbox += [{"run": c.run_id, "id": i} for i in c.consumed_inbox]
        if c.status != ACTIVE:  # its still-queued events become dead letters
            dead.append({"run": c.run_id, "reason": ended_reason(c.status),
                         "keep": list(c.consumed_inbox)})
        journal += [{"run": c.run_id, "n": len(journal) + n, "event": j.event,
                     "before": j.state_before, "after": j.state_after}
                    for n, j in enumerate(c.journal)]  # fmt: skip
    return {"steps": _json(steps), "outcomes": _json(outcomes), "effects": _json(effects),
            "inbox": _json(inbox), "journal": _json(journal), "dead": _json(dead),
            "now": to_ts(now)}  # fmt: skip


def _journal_one(conn: psycopg.Connection[Any], run_id: str, step: int,
                 event: Mapping[str, Any], state: str, ts: Any) -> None:
    """Journal an event the store applied itself (cancel, failure, resume): the state stays."""
    conn.execute(
        "INSERT INTO workflow_events (run_id, step, event, state_before, state_after, "
        "created_at) VALUES (%s, %s, %s, %s, %s, %s)",
        (_uuid(run_id), step, _json(dict(event)), state, state, ts),
    )


def _dead_letter(conn: psycopg.Connection[Any], run_id: str, status: str, ts: Any) -> None:
    """The run's still-queued events become dead letters: it ended in `status`."""
    conn.execute(
        "UPDATE workflow_inbox SET dead_at = %s, dead_reason = %s "
        "WHERE run_id = %s AND dead_at IS NULL",
        (ts, ended_reason(status), _uuid(run_id)),
    )


def _effect_rows(effects: Sequence[NewEffect]) -> list[dict[str, Any]]:
    return [{"i": e.index, "kind": e.kind, "payload": e.payload} for e in effects]


def _uuid(run_id: str) -> str:
    """A run id as PostgreSQL prints it, validated before it reaches a uuid column (a clear
    error, not a SQL one)."""
    try:
        return str(uuid.UUID(run_id))
    except (ValueError, TypeError, AttributeError):
        raise RunNotFoundError(f"no run with id {run_id!r} (not a uuid)") from None


def redact(dsn: str) -> str:
    """The DSN with any password replaced by `***`, safe to log and show in errors."""
    dsn = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", dsn)
    return re.sub(r"(password\s*=\s*)\S+", r"\1***", dsn, flags=re.IGNORECASE)


def _create_schema(dsn: str, name: str) -> None:
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{name}"')
    except psycopg.OperationalError as exc:
        raise StoreUnavailableError(f"PostgreSQL unavailable: {exc}") from exc
