"""PostgreSQL dialect: psycopg 3 with a psycopg-pool connection pool, `jsonb` snapshots.

The SQL is `persistence.stores.sql`'s, shared with SQLite; this module holds what PostgreSQL does
differently. Hot paths are single SQL statements (data-modifying CTEs) run in autocommit mode, so
a worker's round of steps, one step of each run it holds, costs one round trip and one commit.
Claims use `FOR UPDATE SKIP LOCKED`, so many workers on many machines share the table without
blocking each other.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

import orjson
import psycopg
import psycopg_pool
from psycopg import sql
from psycopg.types.json import Jsonb, set_json_dumps, set_json_loads

from persistence import schema
from persistence.stores.clocks import StoreClock, server_clock
from persistence.stores.codec import Column, PayloadCodecError
from persistence.stores.conflicts import count_ended, retried
from persistence.stores.errors import (
    ConflictError,
    RunNotFoundError,
    StoreEncodingError,
    StoreError,
    StoreUnavailableError,
)
from persistence.stores.poolers import Pooling, behind_pooler, refused_options
from persistence.stores.protocol import PayloadCodec
from persistence.stores.records import (
    ACTIVE,
    CallFinish,
    EffectRecord,
    InboxEvent,
    NewEffect,
    NewRun,
    PendingWork,
    RunRecord,
    StepCommit,
    VersionCount,
)
from persistence.stores.rules import (
    CLAIMABLE,
    CLAIMABLE_BY_EVENT,
    STOPPED_BY_END,
    STOPPED_BY_EXIT,
    check_distinct_runs,
    check_status,
    completion_times,
    ended_reason,
    idempotency_key,
    is_call,
    unowned_calls,
)
from persistence.stores.sql import ACTIVE_KEY_CONFLICT, PICKED_NAMES, RUN_NAMES, SQLStore
from persistence.wakeup import Wakeup, shared_wakeup

log = logging.getLogger("statecharts.store")

_FromRest = tuple[int, RunRecord, Mapping[str, Any], str | None, CallFinish | None]
"""A sent event to step from rest: (its index, the run at rest, the event, its traceparent, the
call end it is the result of)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def to_ts(ms: int | None) -> datetime | None:
    """Epoch milliseconds to an aware datetime (exact)."""
    return None if ms is None else _EPOCH + ms * _MS


def to_ms(ts: datetime | None) -> int | None:
    """An aware datetime to epoch milliseconds (exact to the millisecond)."""
    return None if ts is None else (ts - _EPOCH) // _MS


def _dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError as exc:  # orjson.JSONEncodeError: a value no store holds exactly
        raise StoreEncodingError(f"cannot store value: {exc}") from exc


def _json(value: Any) -> str:
    """`value` as JSON text, the parameter of a `jsonb` (an untyped text parameter, which
    the server reads as the `jsonb` its place takes): what psycopg's `Jsonb` sends, without
    its dumper's two Python calls per parameter on the hot statements."""
    return _dumps(value).decode()


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


RUN_COLUMNS = RUN_NAMES.replace("id,", "id::text,", 1)

_PROCESS = uuid.uuid4().hex
"""This process's mark on its NOTIFYs: its own listener skips them (the in-process wake-up was
faster), so one event never wakes a worker twice."""
_CHANNEL = "left('statecharts_wake_' || current_schema(), 63)"
"""The wake-up channel: one per schema, so stores in other schemas are not woken."""
_WAKE_CALL = f"pg_notify({_CHANNEL}, '{_PROCESS}')"
_PROGRESS = "ran"
"""The mark of a NOTIFY telling waiters that a run they watch committed a step (`watch`),
`ran:<run id>`: every listener takes it, this process's too (its waiter may be anywhere)."""
_TOLD = "r.waiters > 0 AND r.waited_until > now() AS told"
"""What a step's run row returns besides its id and version: whether it has waiters."""
_TELL_WAITERS = f"CASE WHEN run.told THEN pg_notify({_CHANNEL}, '{_PROGRESS}:' || run.id::text) END"
"""In a step's result row: a NOTIFY `ran:<run id>` for the run's waiters, only if the row it
wrote says it has some (`waiters`, `waited_until`, schema 11: `watch`). Read from the row the
step's UPDATE wrote, which is the newest version (a waiter's UPDATE commits before the step's
or waits for it), so no waiter is missed; on the hot path, one more column returned."""
_SERVER_TIME = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
"""The database server's clock in epoch ms: the anchor of the store clock."""


@lru_cache(maxsize=256)
def _pg(sql: str) -> str:
    """Shared SQL (`?` markers) in psycopg's format style."""
    return sql.replace("%", "%%").replace("?", "%s")


class PostgresStore(SQLStore):
    """Durable-run store in PostgreSQL.

    `dsn` is a libpq connection string or URL; pass `pool` instead to share an existing
    `psycopg_pool.ConnectionPool` (its connections must be in autocommit mode). `schema` puts the
    tables in that schema (created if missing) via `search_path`, e.g. to isolate tests.
    """

    dialect = "postgres"
    _TEXT_ID = "::text"
    _FOR_UPDATE = " FOR UPDATE"
    _LOCK_ROW = " FOR NO KEY UPDATE"
    _SKIP_LOCKED = " FOR UPDATE SKIP LOCKED"
    _KEY_SHARE = " FOR KEY SHARE"
    _AS_ID = "CAST({} AS uuid)"
    _LOCK_TREE = (
        "SELECT pg_advisory_xact_lock(hashtextextended(id::text, 18)) FROM up WHERE parent IS NULL"
    )
    # (the two-key form: a lock space apart from `_LOCK_TREE`'s one-key locks)
    _LOCK_KEY = "SELECT pg_advisory_xact_lock(hashtext(?), hashtext(?))"
    _JSON_VERSION = "snapshot->>'version'"
    _SEALED_KEY = "{column}->>'$enc'"
    _CLAIM_ORDER = "statecharts_claim_order(wake_at, priority)"  # migration 0005
    _CREATE_IS_ONE_STATEMENT = True
    _NOTIFY = f", pg_notify({_CHANNEL}, '{_PROCESS}:' || run_id::text)"

    def __init__(
        self,
        dsn: str | None = None,
        *,
        pool: psycopg_pool.ConnectionPool[Any] | None = None,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 8,
        connect_timeout_s: float = 10.0,
        pooler: str | None = None,
        listen_dsn: str | None = None,
    ) -> None:
        if (dsn is None) == (pool is None):
            raise ValueError("PostgresStore needs exactly one of dsn= or pool=")
        if schema is not None and not _SCHEMA_NAME.match(schema):
            raise ValueError(f"schema name must match {_SCHEMA_NAME.pattern}: {schema!r}")
        self.schema = schema
        self.pooling = Pooling(pooler, schema)
        self._listener: _Listener | bool | None = None  # (False: none, `_listen`)
        self._listener_lock = threading.Lock()
        self._clock: StoreClock | None = None
        self._listen_dsn = listen_dsn
        kwargs = self.pooling.connect_kwargs()
        if pool is None:
            assert dsn is not None
            self.url = redact(dsn)
            if schema is not None:
                _create_schema(dsn, schema, kwargs, self.url)
            self._pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
                dsn,
                kwargs=kwargs,
                configure=self._configure_new,
                min_size=min_size,
                max_size=max_size,
                timeout=connect_timeout_s,
                open=True,
            )
            self._owns_pool = True
            self._conninfo, self._kwargs = dsn, kwargs
        else:
            self.url = "postgresql://(pool)"
            self._pool = pool
            self._owns_pool = False
            # the listener connects as the pool does (a callable conninfo is the pool's own)
            conninfo, given = pool.conninfo, pool.kwargs
            self._conninfo = conninfo if isinstance(conninfo, str) else conninfo()
            self._kwargs = dict(given if isinstance(given, dict) else (given() if given else {}))

    def _configure_new(self, conn: psycopg.Connection[Any]) -> None:
        """A connection's set-up: JSON (`_configure`), then the pooler's (`Pooling.configure`)."""
        _configure(conn)
        self.pooling.configure(conn)

    # -- plumbing ---------------------------------------------------------------------------
    def _connection(self) -> _Checkout:
        """A pooled connection; connection trouble becomes `StoreUnavailableError`."""
        return _Checkout(
            self._pool, None if self._owns_pool else self._configure_new, self.pooling.begin
        )

    _conn = _connection

    @contextmanager
    def _write(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection inside one transaction."""
        with self._connection() as conn, conn.transaction():
            yield conn

    def _exec(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        return conn.execute(_encoded(_pg(sql)), params) if params else conn.execute(sql)

    def _many(self, conn: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            conn.cursor().executemany(_pg(sql), rows)

    def _statement_write(self) -> Any:
        return self._connection()

    def _rows(self, sql: str, params: Any = ()) -> list[Any]:
        """psycopg-style SQL (`%s` markers) as one autocommitted statement."""
        with self._connection() as conn:
            return _execute(conn, sql, params).fetchall()

    def _read_all(self, queries: Sequence[tuple[str, Sequence[Any]]]) -> list[list[Any]]:
        with self._connection() as conn:
            with conn.pipeline():
                cursors = [conn.execute(_encoded(_pg(sql)), params) for sql, params in queries]
            return [c.fetchall() for c in cursors]

    def _t(self, ms: int | None) -> Any:
        return to_ts(ms)

    def _ms(self, value: Any) -> Any:
        return to_ms(value)

    def _j(self, value: Any) -> Jsonb:
        return Jsonb(value)

    def _load(self, value: Any) -> Any:
        return value

    def _id(self, run_id: str) -> str:
        return _uuid(run_id)

    @retried
    def heartbeat(self, owner: str, run_ids: Collection[str], now: int, lease_ms: int) -> set[str]:
        """Extend the caller's leases without waiting for a row lock. A row locked now is being
        committed by its owner's step (which writes its own lease), so it is skipped yet counted
        as kept: waiting for it instead could deadlock against a batch commit that locks the
        same rows in another order (seen under the load test: the step's calls then ran twice).
        """
        if not run_ids:
            return set()
        ids = [_uuid(i) for i in run_ids]
        expires = to_ts(now + lease_ms)
        rows = self._rows(
            heartbeat_sql("= ANY(%s::uuid[])"), (owner, ids, expires, expires, owner, ids)
        )
        return {r[0] for r in rows}

    def unknown_versions(self, known: Collection[tuple[str, str]]) -> list[VersionCount]:
        """Active runs grouped by versions not in `known`. Workers ask every few seconds, so
        the versions are found by a loose scan of the versions index (one probe per version
        with active runs), and only the runs of unknown versions are read: never every
        active run (a herd of 100,000 made this the table's one sequential scan)."""
        wanted = set(known)
        found: list[VersionCount] = []
        for name, version in self._read(_VERSION_PAIRS):
            if (name, version) not in wanted:
                found += [
                    VersionCount(name, version, int(c), lb)
                    for c, lb in self._read(
                        "SELECT count(*), snapshot->>'version' FROM workflow_runs WHERE "
                        "workflow_name = ? AND workflow_version = ? AND status = ? GROUP BY 2 "
                        "ORDER BY 2",
                        (name, version, ACTIVE),
                    )
                ]
        return found

    def wakeup(self) -> Wakeup:
        """The wake-up of this database and schema; the first call starts the thread that
        LISTENs for other processes' starts and sends (`persistence.wakeup`)."""
        wakeup = shared_wakeup(f"{self.url}#{self.schema or ''}")
        with self._listener_lock:
            if self._listener is None:
                self._listener = self._listen(wakeup) or False
        return wakeup

    @retried
    def watch(self, run_id: str, seconds: float) -> bool:
        """Counted in the run's row (`waiters`, and `waited_until` `seconds` from now, the
        database's clock, which bounds the count a killed waiter leaves), so that each step of
        the run sends a NOTIFY its listeners turn into `progressed`: True once this store's
        listener LISTENs (waited for up to a few seconds), else False. `RunNotFoundError` for
        an unknown run."""
        self.wakeup()  # (which starts the listener)
        listener = self._listener  # (none behind a transaction pooler without listen_dsn)
        if not isinstance(listener, _Listener) or not listener.listening.wait(5.0):
            return False
        # (the row's update waits out a step being written now; a step after it sees it)
        counted = self._rows(
            "UPDATE workflow_runs SET waiters = CASE WHEN waited_until > now() THEN waiters + 1 "
            "ELSE 1 END, waited_until = greatest(waited_until, now() + %s * interval '1 ms') "
            "WHERE id = %s RETURNING 1",
            (int(seconds * 1000), _uuid(run_id)),
        )
        if not counted:
            raise RunNotFoundError(f"no run with id {run_id!r}")
        return True

    @retried
    def unwatch(self, run_id: str) -> None:
        """One waiter of the run fewer (a killed waiter's count runs out at `waited_until`)."""
        self._rows(
            "UPDATE workflow_runs SET waiters = greatest(waiters - 1, 0) WHERE id = %s "
            "AND waiters > 0 RETURNING 1",
            (_uuid(run_id),),
        )

    def _tell_waiters_in(self, conn: Any, run_id: str) -> None:
        conn.execute(
            f"SELECT pg_notify({_CHANNEL}, '{_PROGRESS}:' || id::text) FROM "
            "workflow_runs WHERE id = %s AND waiters > 0 AND waited_until > now()",
            (_uuid(run_id),),
        )

    def _listen(self, wakeup: Wakeup) -> _Listener | None:
        """The listener of this store's wake-ups: on `listen_dsn` if given, else on the store's
        own DSN; none behind a transaction pooler, which cannot carry `LISTEN` (other
        processes' work is then found by polling). Without `pooler=`, the listener checks
        for a pooler itself (`_Listener`)."""
        path = self.pooling.listen_path()
        if self._listen_dsn is not None:
            return _Listener(self._listen_dsn, {"autocommit": True}, path, wakeup, False)
        if self.pooling.mode == "transaction":
            log.info(
                "behind a transaction pooler with no listen_dsn: other processes' "
                "starts and events are found by polling"
            )
            return None
        return _Listener(self._conninfo, self._kwargs, path, wakeup, self.pooling.mode is None)

    def clock(self) -> StoreClock:
        """The database server's clock (`clocks.server_clock`), anchored when first asked."""
        with self._listener_lock:
            if self._clock is None:
                self._clock = server_clock(lambda: int(self._rows(_SERVER_TIME)[0][0]))
            return self._clock

    def close(self) -> None:
        """Stop the wake-up listener; close the pool if this store created it."""
        with self._listener_lock:
            if isinstance(self._listener, _Listener):
                self._listener.close(self._wake_listener)
            self._listener = None
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

    # -- dialect overrides of hot paths ------------------------------------------------------
    def _create_in(
        self,
        conn: Any,
        run: NewRun,
        effects: Sequence[NewEffect],
        now: int,
    ) -> tuple[RunRecord, bool]:
        check_status(run.status)
        completed_at, failed_at = completion_times(run.status, now)
        rid = _canonical(run.id)
        effects_rows = [
            {
                "k": idempotency_key(rid, 1, e.index),
                "i": e.index,
                "kind": e.kind,
                "payload": e.payload,
            }
            for e in effects
            if not is_call(e)
        ]
        calls = [
            {"k": idempotency_key(rid, 1, e.index), "id": e.payload.get("id"), "payload": e.payload}
            for e in effects
            if is_call(e)
        ]
        snapshot: Any = run.snapshot
        if self._ring is not None:  # (nothing more to do in clear: the hot path as it was)
            snapshot = self._ring.seal(snapshot, rid, Column.SNAPSHOT)
            _seal_rows({"effects": effects_rows, "calls": calls}, self._ring, rid)
        params = {
            "id": run.id,
            "name": run.workflow_name,
            "wv": run.workflow_version,
            "key": run.key,
            "state": run.state,
            "snapshot": _json(snapshot),
            "status": run.status,
            "attempts": run.attempt_count,
            "now": now,
            "completed": completed_at,
            "failed": failed_at,
            "last_error": run.last_error,
            "wake": run.wake_at,
            "traceparent": run.traceparent,
            "owner": run.lease_owner,
            "lease": run.wake_at if run.lease_owner else None,
            "claims": int(bool(run.lease_owner)),
            "parent": run.parent_run_id,
            "invoke": run.parent_invoke_id,
            "priority": run.priority,
            "effects": _json(effects_rows),
        }
        if calls:
            owner, until = run.call_lease if run.call_lease is not None else (None, None)
            params.update(
                calls=_json(calls), call_owner=owner, call_lease=until, unowned=owner is None
            )
        # A racing insert of the same key makes ON CONFLICT skip while our snapshot cannot yet
        # see the winner; the second attempt sees it.
        for _ in range(3):
            row = _execute_hot(
                conn, _CREATE_RUN_WITH_CALLS if calls else _CREATE_RUN, params, binary=True
            ).fetchone()
            if row is not None:
                values, created = list(row[:-1]), bool(row[-1])
                if created:  # (the snapshot inserted is not sent back: parsing it cost more)
                    values[5] = run.snapshot
                    self._share_of(conn, run)
                return self._run(values), created
        raise ConflictError(f"could not insert or find run with key {run.key!r}")

    def _lease(
        self,
        owner: str,
        now: int,
        expires: int,
        limit: int,
        pairs: list[tuple[str, str]] | None,
        with_work: bool,
    ) -> tuple[list[RunRecord], dict[str, PendingWork]]:
        """Find and lease in one statement, skipping rows other workers lock; asked
        `with_work`, a second statement in the same round trip reads the leased runs' pending
        effects and queued events."""
        params = lease_params(owner, now, expires, limit, pairs)
        # A lease need not reach the disk before the claimer works: lost in a server crash, it
        # only leaves the run claimable again, every step's commit checks the lease (so
        # nothing is written under a lost one), and that synchronous commit flushes the
        # claim's WAL with its own. So the claim waits for no fsync (one round trip).
        # The work is read by a statement of its own, after the lease: the claim's snapshot
        # predates a step that a stale holder committed while the claim waited for the row
        # (the row is re-read under its lock, other tables are not), so reading the work in
        # the claim's statement could return events that step consumed.
        with self._connection() as conn:
            with conn.pipeline(), conn.transaction():
                conn.execute("SET LOCAL synchronous_commit = off")
                cursor = conn.execute(_lease_sql(pairs is not None, self._CLAIM_ORDER), params)
                found = conn.execute(_LEASED_WORK, params) if with_work else None
            rows = cursor.fetchall()
            work_rows = found.fetchall() if found is not None else None
        return self._leased(rows, work_rows)

    def _leased(
        self, rows: list[Any], work_rows: list[Any] | None
    ) -> tuple[list[RunRecord], dict[str, PendingWork]]:
        """The runs a claim statement (`_lease_sql`) returned, with their work read by
        `_LEASED_WORK` (None: not read)."""
        runs = [self._run(r[:-2], r[-2], r[-1]) for r in rows]
        if work_rows is None:
            return runs, {}
        items = {run_id: (effects, inbox) for run_id, effects, inbox in work_rows}
        return runs, {run.id: self._pending(run.id, *items[run.id]) for run in runs}

    def read_work(self, run_ids: Collection[str]) -> list[tuple[RunRecord, PendingWork]]:
        """The existing runs among `run_ids` with their pending work, in one statement and
        no lease (a plain read: no row lock, no commit to wait for)."""
        ids = [_uuid(i) for i in run_ids]
        if not ids:
            return []
        rows = self._rows(_READ_WORK, {"ids": ids})
        return [(self._run(r[:-2]), self._pending(r[0], r[-2], r[-1])) for r in rows]

    def _pending(self, run_id: str, effects: list[Any], inbox: list[Any]) -> PendingWork:
        """A run's pending work as `_WORK_ARRAYS` aggregates it; a payload that does not open
        (a missing key) makes it the work's `problem`, for the run to be failed with."""
        try:
            return PendingWork(
                [self._pending_effect(run_id, e) for e in effects],
                [self._pending_event(run_id, i) for i in inbox],
            )
        except PayloadCodecError as exc:
            return PendingWork([], [], str(exc))

    def _pending_effect(self, run_id: str, item: list[Any]) -> EffectRecord:
        """An outbox row as `_lease` aggregates it (`_EFFECT_ITEM`)."""
        key, step, index, kind, payload, status, result, error, created, updated = item
        return EffectRecord(
            key,
            run_id,
            step,
            index,
            kind,
            self._open(payload, run_id, Column.EFFECT_PAYLOAD),
            status,
            None if result is None else self._open(result, run_id, Column.EFFECT_RESULT),
            error,
            created,
            updated,
        )

    def _pending_event(self, run_id: str, item: list[Any]) -> InboxEvent:
        """An inbox row as `_lease` aggregates it (`_INBOX_ITEM`)."""
        inbox_id, event, created, traceparent = item
        return InboxEvent(
            inbox_id, run_id, self._open(event, run_id, Column.EVENT), created, traceparent
        )

    @retried
    def commit_steps(
        self, commits: Sequence[StepCommit], now: int, *, cancelled: list[str] | None = None
    ) -> list[int | None]:
        """Write several runs' steps in one statement (one round trip, one commit): each row is
        written only under its lease and version, and its outbox, inbox and journal rows only
        with it, so a step that lost its run writes nothing (None) and the others are kept."""
        check_distinct_runs(commits)
        for commit in commits:
            check_status(commit.status)
        if not commits:
            return []
        ended: list[str] = []
        with self._conn() as conn:
            if not any(_has_extras(c) for c in commits):  # the hot path: one statement
                versions = self._commit_all_in(conn, commits, now, ended)
            else:
                with conn.transaction():
                    versions = self._commit_all_in(conn, commits, now, ended)
                    if any(unowned_calls(c.new_effects, c.call_lease) for c in commits):
                        self._notify_in(conn, None)  # (other processes' executors claim them)
        if cancelled is not None:
            cancelled.extend(ended)
        return versions

    def _commit_all_in(
        self, conn: Any, commits: Sequence[StepCommit], now: int, cancelled: list[str]
    ) -> list[int | None]:
        """The batch as one statement on `conn` (in autocommit, its own transaction), then
        what the written steps do to other runs (`_step_extras_in`: in a transaction)."""
        ids = [_uuid(commit.run_id) for commit in commits]
        written = {
            r[0]: r[1] for r in _execute_hot(conn, *_steps_statement(commits, ids, now, self._ring))
        }
        for commit in commits:  # (rare: a run failed, or has child runs)
            if _has_extras(commit) and _uuid(commit.run_id) in written:
                for run, _ in commit.start_runs:
                    check_status(run.status)
                self._step_extras_in(conn, commit, now, cancelled)
        return [written.get(run_id) for run_id in ids]

    def _commit_later_in(
        self, conn: Any, commit: StepCommit, now: int, cancelled: list[str]
    ) -> Callable[[], int | None]:
        if _has_extras(commit):  # (they need to know it was written)
            return super()._commit_later_in(conn, commit, now, cancelled)
        run_id = _uuid(commit.run_id)
        sql, params = _steps_statement([commit], [run_id], now, self._ring)
        cursor = conn.execute(_encoded(sql), params)
        return lambda: {r[0]: r[1] for r in cursor.fetchall()}.get(run_id)

    @contextmanager
    def _pipelined_write(self) -> Iterator[psycopg.Connection[Any]]:
        """One transaction in pipeline mode: statements go out together until a result is
        fetched, BEGIN with the first ones and COMMIT with the last (plain statements: a
        psycopg `transaction()` block would wait for its BEGIN, and sync before its COMMIT,
        each a round trip of its own). Whatever fails, the transaction is rolled back once
        the pipeline has synced."""
        with self._connection() as conn:
            # (behind a transaction pooler the checkout's transaction is already open, and
            # the checkout commits it)
            own = conn.info.transaction_status == _IDLE
            try:
                with conn.pipeline():  # (BEGIN and COMMIT on the kept cursor: not read)
                    if own:
                        _execute(conn, "BEGIN", None)
                    yield conn
                    if own:
                        _execute(conn, "COMMIT", None)
            except BaseException:
                conn.rollback()
                raise

    @retried
    def send_and_step(
        self,
        run_id: str,
        event: Mapping[str, Any],
        now: int,
        step: Callable[[RunRecord, PendingWork], StepCommit | None],
        *,
        traceparent: str | None = None,
        cancelled: list[str] | None = None,
        rest: RunRecord | None = None,
        finish: CallFinish | None = None,
    ) -> tuple[int, int | None]:
        """`SQLStore.send_and_step`; with `rest`, first the step from rest in one round trip
        (`_step_from_rest`), and only if it was not written the locked read and the step."""
        if rest is not None and _uuid(rest.id) == _uuid(run_id):
            written = self._step_from_rest(rest, event, now, step, traceparent, finish)
            if written is not None:
                return written
        return super().send_and_step(
            run_id, event, now, step, traceparent=traceparent, cancelled=cancelled, finish=finish
        )

    @retried
    def finish_calls(
        self,
        ends: Sequence[tuple[CallFinish, str, Mapping[str, Any]]],
        now: int,
        step: Callable[[RunRecord, PendingWork], StepCommit | None],
        cancelled: list[str] | None = None,
        rests: Mapping[str, RunRecord] | None = None,
    ) -> list[tuple[int, int | None]]:
        """`SQLStore.finish_calls`; first every end whose run is in `rests` as its step from
        rest (`_steps_from_rest`), all of them pipelined in one transaction: one round trip
        and one commit for the burst; the ends whose steps were not written (the run moved
        on, or none was tried) then as `SQLStore.finish_calls` writes them."""
        known = rests or {}
        tried = [
            (i, known[run_id], event, None, finish)
            for i, (finish, run_id, event) in enumerate(ends)
            if run_id in known and _uuid(known[run_id].id) == _uuid(run_id)
        ]
        written = self._steps_from_rest(tried, now, step)
        left = [end for i, end in enumerate(ends) if i not in written]
        others = iter(super().finish_calls(left, now, step, cancelled) if left else [])
        return [written[i] if i in written else next(others) for i in range(len(ends))]

    def _step_from_rest(
        self,
        rest: RunRecord,
        event: Mapping[str, Any],
        now: int,
        step: Callable[[RunRecord, PendingWork], StepCommit | None],
        traceparent: str | None,
        finish: CallFinish | None = None,
    ) -> tuple[int, int] | None:
        """The sent event's step computed from `rest`, written only if the run is still at
        rest at that version (`_FROM_REST_RUN`), in one round trip (`_steps_from_rest`). The
        inbox id and new version; None when the step was not written (nothing was) or not
        tried."""
        return self._steps_from_rest([(0, rest, event, traceparent, finish)], now, step).get(0)

    def _steps_from_rest(
        self,
        sends: Sequence[_FromRest],
        now: int,
        step: Callable[[RunRecord, PendingWork], StepCommit | None],
    ) -> dict[int, tuple[int, int]]:
        """Each sent event's step computed from its run's `rest`, written only if the run is
        still at rest at that version (`_FROM_REST_RUN`), all in one round trip: BEGIN, per
        run the row lock and the step's statement (in one lock order), and COMMIT pipelined.
        The row is locked by a statement of its own, so that the step's statement takes its
        snapshot after the lock: it then sees the event that a sender holding the row before
        it queued (in one statement, a row another transaction only locked is not re-checked
        once it is let go). Not tried: no step, or one with child runs or deliveries (those
        are written by statements that need the run's write to have matched). The written
        ones by their index: (inbox id, new version)."""
        planned: list[tuple[int, str, dict[str, Any]]] = []
        for i, rest, event, traceparent, finish in sends:
            sent = InboxEvent(0, rest.id, dict(event), now, traceparent)
            commit = step(rest, PendingWork([], [sent]))
            if (
                commit is None
                or not (commit.unleased and commit.release)
                or commit.effect_outcomes
                or _has_extras(commit)
            ):
                continue
            check_status(commit.status)
            planned.append((i, *_from_rest_statement(commit, rest, now, self._ring, finish)))
        if not planned:
            return {}
        planned.sort(key=lambda p: str(p[2]["id"]))  # (one lock order for every burst)
        with self._pipelined_write() as conn:
            sent_all = []
            for i, sql, params in planned:
                _execute(conn, _LOCK_RUN, (params["id"],))
                sent_all.append((i, params, conn.execute(_encoded(sql), params)))
        written: dict[int, tuple[int, int]] = {}
        for i, _, cursor in sent_all:
            rows = cursor.fetchall()
            if rows:
                _, version, inbox_id = rows[0][:3]
                written[i] = (int(inbox_id), int(version))
        if any(params["due"] for i, params, _ in sent_all if i in written):
            self.wakeup().notify()
        return written

    def _wake_listener(self) -> None:
        """One NOTIFY on the wake-up channel, so that a closing listener stops waiting now
        (else `close` would wait out its poll of the connection)."""
        with self._connection() as conn:
            self._notify_in(conn, None)

    def _notify_in(self, conn: Any, run_id: str | None) -> None:
        payload = _PROCESS if run_id is None else f"{_PROCESS}:{run_id}"
        conn.execute(f"SELECT pg_notify({_CHANNEL}, %s)", (payload,))


class _Checkout:
    """`with`: a connection of `pool` for one use (configured first: a pool given by the
    caller), returned whatever happens; a psycopg or pool error becomes the store's
    (`_store_error`). What the pool's own `connection()` does, without its second context
    manager, its statistics and the commit that ends a block in autocommit (a statement's
    cost on the hot path: about a third of a `SELECT 1`'s instructions); a transaction left
    open is committed, and rolled back after an error, as that block would."""

    __slots__ = ("_begin", "_configure", "_conn", "_pool")

    def __init__(
        self,
        pool: psycopg_pool.ConnectionPool[Any],
        configure: Callable[[psycopg.Connection[Any]], None] | None,
        begin: bytes | None,
    ) -> None:
        self._pool, self._configure, self._begin = pool, configure, begin

    def __enter__(self) -> psycopg.Connection[Any]:
        try:
            conn: psycopg.Connection[Any] = self._pool.getconn()
        except psycopg_pool.PoolTimeout as exc:
            raise _pool_timeout(self._pool, exc) from exc
        except psycopg.Error as exc:
            raise _store_error(exc) from exc
        self._conn = conn
        try:
            if self._configure is not None:
                self._configure(conn)
            if self._begin is not None:  # (behind a transaction pooler: `Pooling.begin`)
                conn.execute(self._begin)
        except BaseException as exc:
            self._pool.putconn(conn)
            if isinstance(exc, psycopg.Error):
                raise _store_error(exc) from exc
            raise
        return conn

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        conn, error = self._conn, exc
        try:
            if conn.closed:
                pass
            elif error is not None:
                try:
                    conn.rollback()
                except Exception as other:  # (a broken connection: the pool replaces it)
                    log.debug("error ignored in rollback on %s: %s", conn, other)
            elif conn.pgconn.transaction_status != _IDLE:
                conn.commit()
        except BaseException as late:  # the commit failed
            error = late
        finally:
            self._pool.putconn(conn)
        if error is None:
            count_ended()  # (what it wrote, if anything, is committed: `conflicts.retried`)
            return
        mapped = _store_error(error)
        if mapped is not error:
            raise mapped from error
        if error is not exc:
            raise error


_IDLE = psycopg.pq.TransactionStatus.IDLE


def _execute(
    conn: psycopg.Connection[Any], query: str, params: Any, binary: bool = False
) -> psycopg.Cursor[Any]:
    """`conn.execute` on the connection's own cursor, for a result fetched before the next
    statement on it, or never read (in a pipeline, each statement whose result is read later
    needs a cursor of its own): one cursor kept per connection (a new one per statement cost
    about a third of a `SELECT 1`'s client instructions)."""
    cursor: psycopg.Cursor[Any] | None = getattr(conn, "_statecharts_cursor", None)
    if cursor is None or cursor.closed:
        cursor = conn.cursor()
        setattr(conn, "_statecharts_cursor", cursor)  # noqa: B010 (not a declared attribute)
    return cursor.execute(_encoded(query), params, binary=binary)


def _execute_hot(
    conn: psycopg.Connection[Any], query: str, params: Any, binary: bool = False
) -> psycopg.Cursor[Any]:
    """`_execute` for a hot statement with a small result (a start's insert, a step's commit)
    on a cursor kept for that statement: psycopg keeps a cursor's adapters (the parameters'
    dumpers, the columns' loaders) only while it runs the same query object again, and on the
    one shared cursor the start's and the steps' statements alternate, so every statement
    built them anew (about a tenth of a workflow's client instructions)."""
    cursors: dict[bytes, psycopg.Cursor[Any]] | None = getattr(conn, "_statecharts_hot", None)
    if cursors is None:
        cursors = {}
        setattr(conn, "_statecharts_hot", cursors)  # noqa: B010 (not a declared attribute)
    encoded = _encoded(query)
    cursor = cursors.get(encoded)
    if cursor is None or cursor.closed:
        cursor = cursors[encoded] = conn.cursor()
    return cursor.execute(encoded, params, binary=binary)


@lru_cache(maxsize=256)
def _encoded(query: str) -> bytes:
    """`query` as the bytes psycopg sends, the same object each time: psycopg encodes a text
    query anew for every statement and hashes the copy to find its parsed form (a hot
    statement is 2-3 kB: about a tenth of a small statement's client instructions)."""
    return query.encode()


_PROGRAM_LIMIT = "54"
"""SQLSTATE class 54, program_limit_exceeded: a value too big for an index row, a statement
too complex or nested too deeply."""


def _store_error(exc: BaseException) -> BaseException:
    """The store's error for a psycopg, pool or encoding error (others as they are)."""
    if isinstance(exc, psycopg.errors.UniqueViolation):
        return ConflictError(f"duplicate record: {exc.diag.message_detail or exc}")
    if isinstance(exc, psycopg.DataError):  # NUL in text, bad Unicode, number out of range
        return StoreEncodingError(f"PostgreSQL cannot store a value: {exc}")
    if isinstance(exc, UnicodeEncodeError | OverflowError):
        return StoreEncodingError(f"cannot store value: {exc}")
    if isinstance(exc, psycopg.Error) and (exc.sqlstate or "").startswith(_PROGRAM_LIMIT):
        # e.g. "index row size 2720 exceeds btree version 4 maximum 2704": the value, not an
        # outage (psycopg files the class under OperationalError, taken for one below)
        return StoreEncodingError(f"PostgreSQL cannot hold a value ({exc.sqlstate}): {exc}")
    if isinstance(exc, psycopg.OperationalError | psycopg_pool.PoolTimeout):
        return StoreUnavailableError(f"PostgreSQL unavailable: {exc}")
    if isinstance(exc, psycopg.Error):
        return StoreError(f"PostgreSQL error: {exc}")
    return exc


def _steps_statement(
    commits: Sequence[StepCommit],
    ids: list[str],
    now: int,
    ring: PayloadCodec | None,
    from_rest: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """The one statement (and its parameters) that writes `commits` (`_steps_sql`): one
    commit's run row as plain parameters (`_one_run_sql`), a batch's as a JSON row set; its
    payloads sealed by `ring` when there is one."""
    one = len(commits) == 1
    failing = any(c.error_traceback is not None for c in commits)
    params = _steps_params(commits, now, with_runs=not one, tracebacks=failing)
    if ring is not None:
        _seal_rows(params, ring)
    present = {
        "outcomes": params["outcomes"],
        "effects": params["effects"],
        "inbox": params["inbox"] and not from_rest,  # (its event has no row)
        "calls": params["calls"],
        "stops": params["stops"],
        "journal": params["journal"],
        "dead": params["dead"],
        "search": params["search"],
    }
    parts = tuple(name for name, rows in present.items() if rows)
    for name in parts if one else ("steps", *parts):  # (the others are not in the statement)
        params[name] = _json(params[name])
    if not one:
        params["ids"] = _uuid_array(ids)
        return _steps_sql(parts, "batch", failing), params
    commit = commits[0]
    params.update(_run_params(commit, ids[0], now, ring))
    if failing:
        params["error_traceback"] = commit.error_traceback
    if from_rest:
        return _steps_sql(parts, from_rest, failing), params
    form = ("release" if commit.release else "keep", commit.unleased, bool(commit.effect_outcomes))
    return _steps_sql(parts, form, failing), params


def _run_params(
    commit: StepCommit, run_id: str, now: int, ring: PayloadCodec | None
) -> dict[str, Any]:
    """One step's run row as the plain parameters of `_one_run_sql` and `_FROM_REST_RUN`."""
    completed_at, failed_at = completion_times(commit.status, now)
    snapshot = (
        commit.snapshot if ring is None else ring.seal(commit.snapshot, run_id, Column.SNAPSHOT)
    )
    return {
        "id": run_id,
        "expected": commit.expected_version,
        "owner": commit.owner,
        "state": commit.state,
        "snapshot": _json(snapshot),
        "status": commit.status,
        "attempts": commit.attempt_count,
        "last_error": commit.last_error,
        "wv": commit.workflow_version,
        "completed": completed_at,
        "failed": failed_at,
        "lease": commit.lease_until,
        "wake": commit.wake_at,
        "outcome_count": len(commit.effect_outcomes),
    }


def _uuid_array(ids: list[str]) -> str:
    """Canonical uuids (`_uuid`) as the text of a `uuid[]`, which SQL casts: nothing in them
    needs quoting, and psycopg's list adaptation (each element's type found, each one searched
    by a regular expression for what needs quoting) cost about 60k client instructions a step."""
    return "{" + ",".join(ids) + "}"


def _from_rest_statement(
    commit: StepCommit,
    rest: RunRecord,
    now: int,
    ring: PayloadCodec | None,
    finish: CallFinish | None = None,
) -> tuple[str, dict[str, Any]]:
    """`_steps_statement` of a step computed from `rest` (`_FROM_REST_RUN`): the sent event
    is not in the inbox (nothing to consume), the run's columns are plain parameters; with
    `finish`, the step of a call's result, with the call's end (`_FINISH_FROM_REST_RUN`).
    A sealed snapshot is never sealed twice alike (a new nonce each time), so with a `ring`
    the row is matched by its version alone (`was` NULL): an envelope cannot be edited by
    hand into another valid one, and one rewritten by `reencrypt` holds the same value."""
    sql, params = _steps_statement(
        [commit], [_uuid(rest.id)], now, ring, from_rest="finish" if finish else "rest"
    )
    if finish is not None:
        end = finish.end
        params.update(
            call_key=finish.key,
            call_owner=finish.owner,
            call_attempt=finish.attempt,
            call_status=finish.status,
            call_error=end.message if finish.status == "failed" else None,
            outcome=end.outcome,
            error_name=end.error_name,
            message=end.message,
            traceback=end.traceback,
        )
    params.update(
        was=None if ring is not None else _json(rest.snapshot),
        was_version=rest.workflow_version,
        due=commit.wake_at is not None and commit.wake_at <= now,
    )
    return sql, params


def _has_extras(commit: StepCommit) -> bool:
    """Whether a step writes other runs too (starts, stops or tells them)."""
    return bool(commit.start_runs or commit.stop_children or commit.deliveries)


def _epoch_ms(column: str) -> str:
    """SQL for a timestamptz column as epoch milliseconds, rounded down as `to_ms` does."""
    return f"floor(extract(epoch FROM {column}) * 1000)::bigint"


_EFFECT_ITEM = (
    "jsonb_build_array(e.idempotency_key, e.step, e.effect_index, e.kind, e.payload, e.status, "
    f"e.result, e.error, {_epoch_ms('e.created_at')}, {_epoch_ms('e.updated_at')})"
)
_INBOX_ITEM = f"jsonb_build_array(i.id, i.event, {_epoch_ms('i.created_at')}, i.traceparent)"
_WORK_ARRAYS = (
    f"(SELECT coalesce(jsonb_agg({_EFFECT_ITEM} ORDER BY e.step, "
    "e.effect_index), '[]'::jsonb) FROM workflow_effects e WHERE e.run_id = r.id AND "
    f"e.status = 'pending'), (SELECT coalesce(jsonb_agg({_INBOX_ITEM} ORDER BY i.id), "
    "'[]'::jsonb) FROM workflow_inbox i WHERE i.run_id = r.id AND i.dead_at IS NULL)"
)
"""A run `r`'s pending effects and live inbox events as two JSON arrays (the rows
`pending_work` reads, in its order)."""
_LEASED_WORK = (
    f"SELECT r.id::text, {_WORK_ARRAYS} "
    "FROM workflow_runs r WHERE r.wake_at = %(exp)s AND r.lease_owner = %(owner)s"
)
"""After a claim, in its transaction: the pending effects and live inbox events of the runs it
leased (found by the lease it set, through the due-time index), as `_WORK_ARRAYS`."""
_READ_WORK = (
    f"SELECT {RUN_COLUMNS.replace('id::text', 'r.id::text', 1)}, {_WORK_ARRAYS} "
    "FROM workflow_runs r WHERE r.id = ANY(%(ids)s::uuid[])"
)
"""`read_work`: runs by id with their pending work (`_WORK_ARRAYS`), no lease."""


def heartbeat_sql(ids: str) -> str:
    """`PostgresStore.heartbeat`'s statement, its runs matched by `id {ids}` (a parameter):
    the owner's leases extended, skipping rows locked now; the runs it still holds."""
    return (
        f"WITH locked AS (SELECT id FROM workflow_runs WHERE lease_owner = %s AND id {ids} "
        "ORDER BY id FOR UPDATE SKIP LOCKED), extended AS (UPDATE workflow_runs r SET "
        "lease_expires_at = %s, wake_at = %s FROM locked WHERE r.id = locked.id RETURNING r.id) "
        f"SELECT id::text FROM workflow_runs WHERE lease_owner = %s AND id {ids}"
    )


def lease_params(
    owner: str, now: int, expires: int, limit: int, pairs: list[tuple[str, str]] | None
) -> dict[str, Any]:
    """The parameters of the claim statement (`_lease_sql`)."""
    return {
        "now": to_ts(now),
        "exp": to_ts(expires),
        "limit": limit,
        "owner": owner,
        "names": [n for n, _ in pairs or ()],
        "versions": [v for _, v in pairs or ()],
    }


@lru_cache(maxsize=4)
def _lease_sql(filtered: bool, order: str) -> str:
    """The claim statement: find the claimable runs (restricted to the given versions when
    `filtered`) in `order` (the due time aged by priority), lease them, return them with
    their previous owner and due time."""
    version_sql = (
        "AND (workflow_name, workflow_version) IN "
        "(SELECT * FROM unnest(%(names)s::text[], %(versions)s::text[]))"
        if filtered
        else ""
    )
    free = "(lease_owner IS NULL OR lease_expires_at <= %(now)s)"
    due = CLAIMABLE.format(now="%(now)s", free=free)
    asked = CLAIMABLE_BY_EVENT.format(free=free)
    return (
        f"WITH due AS (SELECT {PICKED_NAMES} FROM workflow_runs WHERE {due} "
        # priorities (issue 30): never negative, so a due run's order is at most now
        f"AND {order} <= %(now)s {version_sql} ORDER BY {order} "
        "LIMIT %(limit)s FOR UPDATE SKIP LOCKED), "
        # the inbox's run ids as one array: an index probe per id, whatever the planner
        # guesses of the (often empty, never analysed) inbox
        f"asked AS (SELECT {PICKED_NAMES} FROM workflow_runs WHERE id = ANY(ARRAY(SELECT "
        f"DISTINCT run_id FROM workflow_inbox WHERE dead_at IS NULL)) AND {asked} "
        f"{version_sql} LIMIT %(limit)s FOR UPDATE SKIP LOCKED), "
        f"picked AS (SELECT {PICKED_NAMES} FROM due UNION SELECT {PICKED_NAMES} FROM asked "
        "LIMIT %(limit)s) "
        "UPDATE workflow_runs r SET lease_owner = %(owner)s, lease_expires_at = %(exp)s, "
        "wake_at = %(exp)s, claim_count = r.claim_count + 1 FROM picked "
        "WHERE r.id = picked.id RETURNING "
        + RUN_COLUMNS.replace("id::text", "r.id::text")
        .replace("lease_owner", "r.lease_owner")
        .replace("wake_at", "r.wake_at")
        + ", picked.lease_owner, picked.wake_at"
    )


def _ts(column: str) -> str:
    """SQL for a millisecond epoch (bigint, from JSON) as timestamptz, exactly."""
    return f"('epoch'::timestamptz + {column} * interval '1 millisecond')"


def _at(name: str) -> str:
    """SQL for the parameter `name`, a millisecond epoch (an int, or None), as timestamptz: the
    hot statements take times as the integers the runtime keeps (no `datetime` built per
    parameter on the client), converted exactly as `_ts` converts JSON's."""
    return _ts(f"%({name})s::bigint")


_NOW = _at("now")
_CREATE_RUN = f"""
WITH ins AS (
    INSERT INTO workflow_runs ({RUN_COLUMNS.replace("id::text", "id")})
    VALUES (%(id)s, %(name)s, %(wv)s, %(key)s, %(state)s, %(snapshot)s, %(status)s,
            %(attempts)s, {_NOW}, {_NOW}, {_at("completed")}, {_at("failed")}, %(last_error)s,
            {_at("wake")}, %(owner)s, {_at("lease")}, 1, %(claims)s, %(traceparent)s, %(parent)s,
            %(invoke)s, %(priority)s, NULL)
    {ACTIVE_KEY_CONFLICT} DO NOTHING
    RETURNING *, CASE WHEN lease_owner IS NULL AND wake_at <= {_NOW} THEN {_WAKE_CALL} END
), effects AS (
    INSERT INTO workflow_effects (idempotency_key, run_id, step, effect_index, kind, payload,
                                  status, created_at, updated_at)
    SELECT n.k, ins.id, 1, n.i, n.kind, n.payload, 'pending', {_NOW}, {_NOW}
    FROM ins, jsonb_to_recordset(%(effects)s) AS n(k text, i integer, kind text, payload jsonb)
)
SELECT {RUN_COLUMNS.replace(" snapshot,", " NULL::jsonb,", 1)}, true FROM ins
UNION ALL
SELECT {RUN_COLUMNS}, false FROM workflow_runs
WHERE workflow_name = %(name)s AND key = %(key)s AND status = 'active'
  AND parent_run_id IS NULL AND NOT EXISTS (SELECT 1 FROM ins)
"""
_CREATE_CALLS = f"""), calls AS (
    INSERT INTO workflow_calls (idempotency_key, run_id, step, call_id, payload, status, attempt,
                                owner, lease_expires_at, available_at, created_at, updated_at)
    SELECT c.k, ins.id, 1, c.id, c.payload,
           CASE WHEN %(unowned)s THEN 'pending' ELSE 'running' END,
           CASE WHEN %(unowned)s THEN 0 ELSE 1 END, %(call_owner)s, {_at("call_lease")},
           {_NOW}, {_NOW}, {_NOW}
    FROM ins, jsonb_to_recordset(%(calls)s) AS c(k text, id text, payload jsonb)
), call_attempts AS (
    INSERT INTO workflow_call_attempts (idempotency_key, attempt, run_id, worker, started_at)
    SELECT c.k, 1, ins.id, %(call_owner)s, {_NOW}
    FROM ins, jsonb_to_recordset(%(calls)s) AS c(k text, id text, payload jsonb)
    WHERE NOT %(unowned)s
)"""
_CREATE_RUN_WITH_CALLS = _CREATE_RUN.replace(
    f"THEN {_WAKE_CALL} END", f"OR %(unowned)s THEN {_WAKE_CALL} END"
).replace("\n)\nSELECT", _CREATE_CALLS + "\nSELECT", 1)
"""`_CREATE_RUN` with the first step's calls (`workflow_calls`), leased to the starter's
executor (their first attempts open) or due for any worker's (woken)."""


class _Listener:
    """A thread with a connection of its own that LISTENs on the wake-up channel and turns
    other processes' NOTIFYs into `Wakeup.notify`; it reconnects after an outage (and wakes
    once then, for whatever it missed). `path`: the statement that sets its schema; `check`:
    whether to stop, and leave wake-ups to polling, on finding a pooler in between (one in
    transaction mode would take the `LISTEN` to a server connection other clients get)."""

    def __init__(
        self, conninfo: str, kwargs: dict[str, Any], path: bytes | None, wakeup: Wakeup, check: bool
    ) -> None:
        self._conninfo, self._kwargs, self._wakeup = conninfo, kwargs, wakeup
        self._path, self._check = path, check
        self._closed = threading.Event()
        self.listening = threading.Event()
        """Set while the connection LISTENs (a waiter relies on NOTIFYs only then)."""
        self._thread = threading.Thread(target=self._listen, name="statecharts-listen", daemon=True)
        self._thread.start()

    def close(self, wake: Callable[[], None]) -> None:
        """Stop the thread: `wake` sends a NOTIFY that ends its wait at once (if the database
        cannot be reached, the wait ends by its own timeout)."""
        self._closed.set()
        try:
            wake()
        except psycopg.Error as exc:
            log.debug("wake-up listener not woken to close: %s", exc)
        self._thread.join(timeout=2.0)

    def _listen(self) -> None:
        backoff = 0.1
        while not self._closed.is_set():
            try:
                with psycopg.connect(self._conninfo, **self._kwargs) as conn:
                    if self._check and behind_pooler(conn):
                        log.warning(
                            "wake-up listener: a connection pooler is in between, "
                            "which may not carry LISTEN: other processes' work is "
                            "found by polling (set ?pooler=session to listen through "
                            "it, or ?listen_dsn= to listen directly)"
                        )
                        return
                    if self._path is not None:
                        conn.execute(self._path)
                    (channel,) = conn.execute(f"SELECT {_CHANNEL}").fetchall()[0]
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(str(channel))))
                    self._wakeup.notify()
                    self._wakeup.progressed(None)  # (a step may have been missed meanwhile)
                    self.listening.set()
                    backoff = 0.1
                    while not self._closed.is_set():
                        for note in conn.notifies(timeout=0.5):
                            if self._closed.is_set():
                                break
                            process, _, run_id = note.payload.partition(":")
                            if process == _PROGRESS:
                                self._wakeup.progressed(run_id)
                            elif process != _PROCESS:  # a sent event names its run
                                self._wakeup.notify(run_id or None)
            except psycopg.Error as exc:
                self.listening.clear()
                log.warning(
                    "wake-up listener: %s; reconnecting in %.1fs (workers poll meanwhile)",
                    exc,
                    backoff,
                )
                self._closed.wait(backoff)
                backoff = min(backoff * 2, 5.0)


_VERSION_PAIRS = """
WITH RECURSIVE pairs(n, v) AS (
    (SELECT workflow_name, workflow_version FROM workflow_runs
     ORDER BY workflow_name, workflow_version LIMIT 1)
    UNION ALL
    SELECT x.n, x.v FROM pairs p CROSS JOIN LATERAL (
        SELECT workflow_name AS n, workflow_version AS v FROM workflow_runs
        WHERE (workflow_name, workflow_version) > (p.n, p.v)
        ORDER BY workflow_name, workflow_version LIMIT 1) AS x
)
SELECT n, v FROM pairs"""
"""Every (name, version) pair of `workflow_runs`, whatever its runs' statuses: a loose scan of
`workflow_runs_versions`, one probe per pair."""


_STEPS_RUNS = f"""
WITH b AS (
    SELECT * FROM jsonb_to_recordset(%(steps)s) AS b(
        id uuid, expected bigint, owner text, state text, snapshot jsonb, status text,
        attempts integer, last_error text, wv text, completed bigint, failed bigint,
        release boolean, lease bigint, wake bigint, outcome_keys text[], unleased boolean)
), run AS (
    UPDATE workflow_runs r SET state = b.state, snapshot = b.snapshot, status = b.status,
        attempt_count = coalesce(b.attempts, r.attempt_count),
        last_error = coalesce(b.last_error, r.last_error), updated_at = {_NOW},
        workflow_version = coalesce(b.wv, r.workflow_version),
        completed_at = coalesce(r.completed_at, {_ts("b.completed")}),
        failed_at = coalesce(r.failed_at, {_ts("b.failed")}), version = b.expected + 1,
        lease_owner = CASE WHEN b.release THEN NULL ELSE b.owner END,
        claim_count = r.claim_count + (b.unleased AND NOT b.release)::int,
        lease_expires_at = CASE WHEN b.release THEN NULL
                                ELSE coalesce({_ts("b.lease")}, r.lease_expires_at) END,
        wake_at = CASE WHEN b.release THEN {_ts("b.wake")}
                       ELSE coalesce({_ts("b.lease")}, r.wake_at) END
    FROM b
    WHERE r.id = ANY(%(ids)s::uuid[])  -- the planner sees the batch size: index, never seq scan
      AND r.id = b.id AND r.version = b.expected
      AND CASE WHEN b.unleased THEN r.lease_owner IS NULL AND r.status = 'active'
               ELSE r.lease_owner = b.owner END
      AND (cardinality(b.outcome_keys) = 0
           OR (SELECT count(*) FROM workflow_effects e
               WHERE e.run_id = b.id AND e.status = 'pending'
                 AND e.idempotency_key = ANY(b.outcome_keys)) = cardinality(b.outcome_keys))
    RETURNING r.id, r.version, r.snapshot, {_TOLD}
)"""
_ONE_RUN_SET = f"""
    UPDATE workflow_runs r SET state = %(state)s, snapshot = %(snapshot)s, status = %(status)s,
        attempt_count = coalesce(%(attempts)s, r.attempt_count),
        last_error = coalesce(%(last_error)s, r.last_error), updated_at = {_NOW},
        workflow_version = coalesce(%(wv)s, r.workflow_version),
        completed_at = coalesce(r.completed_at, {_at("completed")}),
        failed_at = coalesce(r.failed_at, {_at("failed")}), version = %(expected)s::bigint + 1,"""
"""The columns one step writes in its run row, as plain parameters (`_FROM_REST_RUN`,
`_one_run_sql`); each adds how it holds the lease and which row it may write."""
_FROM_REST_RUN = (
    """
WITH run AS ("""
    + _ONE_RUN_SET
    + f"""
        wake_at = {_at("wake")}
    WHERE r.id = %(id)s AND r.version = %(expected)s::bigint AND r.lease_owner IS NULL
      AND r.status = 'active' AND r.snapshot = coalesce(%(was)s, r.snapshot)
      AND r.workflow_version = %(was_version)s
      AND NOT EXISTS (SELECT 1 FROM workflow_inbox i WHERE i.run_id = r.id AND i.dead_at IS NULL)
      AND NOT EXISTS (SELECT 1 FROM workflow_effects e
                      WHERE e.run_id = r.id AND e.status = 'pending')
    RETURNING r.id, r.version, r.snapshot, {_TOLD}
)"""
)
"""The run's row written by a step computed from the run as last committed here
(`send_and_step`'s `rest`): what `_STEPS_RUNS` writes for an unleased step that releases the
run and executed nothing (so no outcomes, no lease to take or give back), as plain parameters
(measured: 0.21 ms of server time against the batch form's 0.29, and 0.1 ms less client CPU),
only if the run is still so: at the version,
with the snapshot and definition the step was computed from (the version alone does not see a
hand edit of the row, which must never be overwritten: a row that does not restore is failed
by a claim, as it is), active, held by nobody, no event waiting before the sent one and no
effect waiting to run."""
_FINISH_FROM_REST_RUN = (
    _FROM_REST_RUN.replace(
        "\nWITH run AS (",
        """
WITH held AS (
    SELECT 1 FROM workflow_calls WHERE idempotency_key = %(call_key)s AND owner = %(call_owner)s
      AND attempt = %(call_attempt)s::integer AND status = 'running' FOR UPDATE
), run AS (""",
        1,
    ).replace(
        f"    RETURNING r.id, r.version, r.snapshot, {_TOLD}\n)",
        f"      AND EXISTS (SELECT 1 FROM held)\n    RETURNING "
        f"r.id, r.version, r.snapshot, {_TOLD}\n)",
        1,
    )
    + f"""
, finished AS (
    UPDATE workflow_calls k SET status = %(call_status)s, owner = NULL, lease_expires_at = NULL,
        error = %(call_error)s, updated_at = {_NOW}
    FROM run WHERE k.idempotency_key = %(call_key)s
), attempt_ended AS (
    UPDATE workflow_call_attempts a SET outcome = %(outcome)s, ended_at = {_NOW},
        error_name = %(error_name)s, message = %(message)s, traceback = %(traceback)s
    FROM run WHERE a.idempotency_key = %(call_key)s AND a.attempt = %(call_attempt)s::integer
      AND a.outcome IS NULL
)"""
)
"""`_FROM_REST_RUN` for the step that applies a call's result (`send_and_step`'s `finish`),
written with the call's end only while its holder still holds it (the call's row locked):
one round trip for a call's end and the step it feeds."""
_FROM_REST_RESULT = (
    "\nSELECT id::text, version, nextval('workflow_inbox_id_seq'), "
    f"CASE WHEN %(due)s THEN {_WAKE_CALL} END, {_TELL_WAITERS} FROM run"
)
"""The result of a step written from rest: the new version, the sent event's inbox id (drawn
from the inbox's sequence, as its insert would), and the wake-up of other processes' workers
when the step left work due."""
_LOCK_RUN = "SELECT 1 FROM workflow_runs WHERE id = %s FOR NO KEY UPDATE"
_STEPS_PARTS = {
    "outcomes": f""", outcomes AS (
    UPDATE workflow_effects e SET status = o.s, result = o.r, error = o.e, updated_at = {_NOW}
    FROM run JOIN jsonb_to_recordset(%(outcomes)s) AS o(run uuid, k text, s text, r jsonb, e text)
        ON o.run = run.id
    WHERE e.idempotency_key = o.k AND e.run_id = run.id AND e.status = 'pending'
)""",
    "effects": f""", effects AS (
    INSERT INTO workflow_effects (idempotency_key, run_id, step, effect_index, kind, payload,
                                  status, created_at, updated_at)
    SELECT n.k, run.id, run.version, n.i, n.kind,
           n.payload, 'pending', {_NOW}, {_NOW}
    FROM run JOIN jsonb_to_recordset(%(effects)s) AS n(run uuid, k text, i integer, kind text,
                                                        payload jsonb) ON n.run = run.id
)""",
    "inbox": """, consumed AS (
    DELETE FROM workflow_inbox i USING run, jsonb_to_recordset(%(inbox)s) AS c(run uuid, id bigint)
    WHERE c.run = run.id AND i.run_id = run.id AND i.id = c.id
)""",
    "dead": f""", dead AS (
    UPDATE workflow_inbox i SET dead_at = {_NOW}, dead_reason = d.reason
    FROM run JOIN jsonb_to_recordset(%(dead)s) AS d(run uuid, reason text, keep bigint[])
        ON d.run = run.id
    WHERE i.run_id = run.id AND i.dead_at IS NULL AND NOT (i.id = ANY(d.keep))
)""",
    "calls": f""", calls AS (
    INSERT INTO workflow_calls (idempotency_key, run_id, step, call_id, payload, status, attempt,
                                owner, lease_expires_at, available_at, created_at, updated_at)
    SELECT c.k, run.id, run.version, c.id, c.payload,
           CASE WHEN c.owner IS NULL THEN 'pending' ELSE 'running' END,
           CASE WHEN c.owner IS NULL THEN 0 ELSE 1 END, c.owner, {_ts("c.lease")},
           {_NOW}, {_NOW}, {_NOW}
    FROM run JOIN jsonb_to_recordset(%(calls)s) AS c(run uuid, k text, id text, payload jsonb,
                                                      owner text, lease bigint) ON c.run = run.id
), call_attempts AS (
    INSERT INTO workflow_call_attempts (idempotency_key, attempt, run_id, worker, started_at)
    SELECT c.k, 1, run.id, c.owner, {_NOW}
    FROM run JOIN jsonb_to_recordset(%(calls)s) AS c(run uuid, k text, id text, payload jsonb,
                                                      owner text, lease bigint) ON c.run = run.id
    WHERE c.owner IS NOT NULL
)""",
    "stops": f""", stopping AS (
    SELECT k.idempotency_key AS k, k.attempt, k.status AS was, k.run_id, s.reason, s.drop, s.keep
    FROM run JOIN jsonb_to_recordset(%(stops)s) AS s(run uuid, id text, reason text,
                                                      drop boolean, keep bigint[]) ON s.run = run.id
    JOIN workflow_calls k ON k.run_id = run.id AND k.call_id = s.id AND k.step < run.version
), stopped AS (
    UPDATE workflow_calls k SET status = 'stopped', error = st.reason, owner = NULL,
        lease_expires_at = NULL, updated_at = {_NOW}
    FROM stopping st WHERE k.idempotency_key = st.k AND st.was IN ('pending', 'running')
), stopped_attempts AS (
    UPDATE workflow_call_attempts a SET outcome = 'stopped', ended_at = {_NOW}, message = st.reason
    FROM stopping st WHERE a.idempotency_key = st.k AND a.attempt = st.attempt
      AND a.outcome IS NULL AND st.was IN ('pending', 'running')
), dropped AS (
    UPDATE workflow_inbox i SET dead_at = {_NOW}, dead_reason = 'the result of a call ' || st.reason
    FROM stopping st WHERE i.run_id = st.run_id AND i.call_key = st.k AND i.dead_at IS NULL
      AND st.drop AND st.was IN ('done', 'failed') AND NOT (i.id = ANY(st.keep))
)""",
    "journal": f""", journal AS (
    INSERT INTO workflow_events (run_id, step, event, state_before, state_after, created_at,
                                 inbox_id, snapshot)
    SELECT run.id, run.version, j.event, j.before, j.after, {_NOW}, j.inbox,
           CASE WHEN j.last THEN run.snapshot END
    FROM run JOIN jsonb_to_recordset(%(journal)s) AS j(run uuid, n integer, event jsonb,
                                                        before text, after text, inbox bigint,
                                                        last boolean)
        ON j.run = run.id
    ORDER BY j.n
)""",
    "search": """, search_set AS (
    INSERT INTO workflow_search (run_id, name, value)
    SELECT run.id, a.name, a.value
    FROM run JOIN jsonb_to_recordset(%(search)s) AS a(run uuid, name text, value text)
        ON a.run = run.id
    WHERE a.value IS NOT NULL
    ON CONFLICT (run_id, name) DO UPDATE SET value = excluded.value
), search_unset AS (
    DELETE FROM workflow_search s
    USING run, jsonb_to_recordset(%(search)s) AS a(run uuid, name text, value text)
    WHERE a.run = run.id AND s.run_id = run.id AND s.name = a.name AND a.value IS NULL
)""",
}


_STEPS_RESULT = f"\nSELECT id::text, version, {_TELL_WAITERS} FROM run"
"""The result of a step statement: each written run's id and new version (its waiters told)."""


@lru_cache(maxsize=64)
def _steps_sql(
    parts: tuple[str, ...], run: str | tuple[str, bool, bool] = "batch", tracebacks: bool = False
) -> str:
    """The one statement that commits steps, with only the parts it needs (fewer
    sub-statements to plan and run on the hot path); `run`: how it writes the run rows, a
    batch's (`_STEPS_RUNS`), one step computed from rest (`"rest"`: `_FROM_REST_RUN`,
    `_FROM_REST_RESULT`) or one step's (`_one_run_sql`'s form); the other parts are the batch's.
    `tracebacks`: a step fails its run with a traceback (`_with_error_traceback`)."""
    body = "".join(_STEPS_PARTS[p] for p in parts)
    if run == "rest":
        sql = _FROM_REST_RUN + body + _FROM_REST_RESULT
    elif run == "finish":
        sql = _FINISH_FROM_REST_RUN + body + _FROM_REST_RESULT
    elif run == "batch":
        sql = _STEPS_RUNS + body + _STEPS_RESULT
    else:
        assert isinstance(run, tuple)
        sql = _one_run_sql(*run) + body + _STEPS_RESULT
    return _with_error_traceback(sql, run == "batch") if tracebacks else sql


def _with_error_traceback(sql: str, batch: bool) -> str:
    """A step statement that also writes `error_traceback` beside `last_error` (the batch's
    from its JSON row set, one step's as the parameter `error_traceback`): only the rare step
    that fails its run names the column, so the hot statements stay as they were."""
    value = "b.error_traceback" if batch else "%(error_traceback)s"
    written = sql.replace(
        "last_error = coalesce(",
        f"error_traceback = coalesce({value}, r.error_traceback),\n        last_error = coalesce(",
        1,
    )
    if batch:
        written = written.replace("unleased boolean)", "unleased boolean, error_traceback text)", 1)
    assert written.count("error_traceback") == (4 if batch else 3), written
    return written


def _one_run_sql(lease: str, unleased: bool, outcomes: bool) -> str:
    """`_STEPS_RUNS` for one step, its row's columns as plain parameters and its choices
    (whether it keeps the lease, was computed without one, records outcomes) made here, not
    by a CASE per row: the batch's JSON row set of the run is a parse on the server and a
    16-key object on the client, for one row."""
    if lease == "release":
        held = f"lease_owner = NULL, lease_expires_at = NULL, wake_at = {_at('wake')}"
    else:
        held = (
            "lease_owner = %(owner)s, "
            + ("claim_count = r.claim_count + 1, " if unleased else "")
            + f"lease_expires_at = coalesce({_at('lease')}, r.lease_expires_at), "
            f"wake_at = coalesce({_at('lease')}, r.wake_at)"
        )
    holder = (
        "r.lease_owner IS NULL AND r.status = 'active'" if unleased else "r.lease_owner = %(owner)s"
    )
    pending = (
        "\n      AND (SELECT count(*) FROM workflow_effects e WHERE e.run_id = r.id"
        " AND e.status = 'pending' AND e.idempotency_key IN (SELECT o.k FROM "
        "jsonb_to_recordset(%(outcomes)s) AS o(k text))) = %(outcome_count)s"
        if outcomes
        else ""
    )
    return f"""
WITH run AS ({_ONE_RUN_SET} {held}
    WHERE r.id = %(id)s AND r.version = %(expected)s::bigint AND {holder}{pending}
    RETURNING r.id, r.version, r.snapshot, {_TOLD}
)"""


def _steps_params(
    commits: Sequence[StepCommit], now: int, with_runs: bool = True, tracebacks: bool = False
) -> dict[str, Any]:
    """The batch as JSON row sets, one per table the statement writes (`with_runs`: the
    runs' rows too, `steps`; `tracebacks`: with their `error_traceback`)."""
    steps: list[dict[str, Any]] = []
    outcomes: list[dict[str, Any]] = []
    effects: list[dict[str, Any]] = []
    inbox: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    stops: list[dict[str, Any]] = []
    journal: list[dict[str, Any]] = []
    dead: list[dict[str, Any]] = []
    search: list[dict[str, Any]] = []
    for c in commits:
        if with_runs:
            completed_at, failed_at = completion_times(c.status, now)
            steps.append(
                {
                    "id": c.run_id,
                    "expected": c.expected_version,
                    "owner": c.owner,
                    "state": c.state,
                    "snapshot": c.snapshot,
                    "status": c.status,
                    "attempts": c.attempt_count,
                    "last_error": c.last_error,
                    "wv": c.workflow_version,
                    "completed": completed_at,
                    "failed": failed_at,
                    "release": c.release,
                    "lease": c.lease_until,
                    "wake": c.wake_at,
                    "outcome_keys": [o.idempotency_key for o in c.effect_outcomes],
                    "unleased": c.unleased,
                }
            )
            if tracebacks:
                steps[-1]["error_traceback"] = c.error_traceback
        outcomes += [
            {"run": c.run_id, "k": o.idempotency_key, "s": o.status, "r": o.result, "e": o.error}
            for o in c.effect_outcomes
        ]
        step = c.expected_version + 1
        effects += [
            {
                "run": c.run_id,
                "k": idempotency_key(_uuid(c.run_id), step, e.index),
                "i": e.index,
                "kind": e.kind,
                "payload": e.payload,
            }
            for e in c.new_effects
            if not is_call(e)
        ]
        owner, lease = c.call_lease if c.call_lease is not None else (None, None)
        calls += [
            {
                "run": c.run_id,
                "k": idempotency_key(_uuid(c.run_id), step, e.index),
                "id": e.payload.get("id"),
                "payload": e.payload,
                "owner": owner,
                "lease": lease,
            }
            for e in c.new_effects
            if is_call(e)
        ]
        reason = STOPPED_BY_EXIT if c.status == ACTIVE else STOPPED_BY_END
        stops += [
            {
                "run": c.run_id,
                "id": i,
                "reason": reason,
                "drop": c.status == ACTIVE,
                "keep": list(c.consumed_inbox),
            }
            for i in c.stop_calls
        ]
        inbox += [{"run": c.run_id, "id": i} for i in c.consumed_inbox]
        if c.status != ACTIVE:  # its still-queued events become dead letters
            dead.append(
                {"run": c.run_id, "reason": ended_reason(c.status), "keep": list(c.consumed_inbox)}
            )
        journal += [
            {
                "run": c.run_id,
                "n": len(journal) + n,
                "event": j.event,
                "before": j.state_before,
                "after": j.state_after,
                "inbox": j.inbox_id,
                "last": n == len(c.journal) - 1,
            }  # (its row keeps the step's snapshot)
            for n, j in enumerate(c.journal)
        ]
        search += [{"run": c.run_id, "name": n, "value": v} for n, v in c.search.items()]
    return {
        "steps": steps,
        "outcomes": outcomes,
        "effects": effects,
        "inbox": inbox,
        "calls": calls,
        "stops": stops,
        "journal": journal,
        "dead": dead,
        "search": search,
        "now": now,
    }


def _seal_rows(params: Mapping[str, Any], ring: PayloadCodec, run_id: str | None = None) -> None:
    """The payloads of `_steps_params`' row sets (those of them in `params`) sealed in
    place, each for its run (its `run`, or `run_id` for a new run's rows, which have none)."""
    for name, field, column in (
        ("steps", "snapshot", Column.SNAPSHOT),
        ("outcomes", "r", Column.EFFECT_RESULT),
        ("effects", "payload", Column.EFFECT_PAYLOAD),
        ("calls", "payload", Column.CALL_PAYLOAD),
        ("journal", "event", Column.JOURNAL),
    ):
        for row in params.get(name, ()):
            owner = run_id or _uuid(row["id"] if name == "steps" else row["run"])
            row[field] = ring.seal(row[field], owner, column)


def _canonical(run_id: str) -> str:
    """A new run's id as PostgreSQL will print it (left as given when it is no uuid: the insert
    then refuses it)."""
    try:
        return _printed(run_id)
    except ValueError:
        return run_id


def _uuid(run_id: str) -> str:
    """A run id as PostgreSQL prints it, validated before it reaches a uuid column (a clear
    error, not a SQL one)."""
    try:
        return _printed(run_id)
    except (ValueError, TypeError, AttributeError):
        raise RunNotFoundError(f"no run with id {run_id!r} (not a uuid)") from None


@lru_cache(maxsize=4096)
def _printed(run_id: str) -> str:
    """The uuid `run_id` as PostgreSQL prints it (kept: a run's steps ask for its id again and
    again, and parsing a uuid costs more than the lookup)."""
    return str(uuid.UUID(run_id))


def redact(dsn: str) -> str:
    """The DSN with any password replaced by `***`, safe to log and show in errors."""
    dsn = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", dsn)
    return re.sub(r"(password\s*=\s*)\S+", r"\1***", dsn, flags=re.IGNORECASE)


def _create_schema(dsn: str, name: str, kwargs: dict[str, Any], where: str) -> None:
    """Create schema `name` if missing, connecting as the pool will (`kwargs`): a pooler that
    refuses how the pool connects says so now, not as a pool timeout later."""
    try:
        with psycopg.connect(dsn, **kwargs) as conn:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{name}"')
    except psycopg.OperationalError as exc:
        raise refused_options(exc, where) or StoreUnavailableError(
            f"PostgreSQL unavailable: {exc}"
        ) from exc


def _pool_timeout(
    pool: psycopg_pool.ConnectionPool[Any], exc: psycopg_pool.PoolTimeout
) -> StoreError:
    """The store's error for a pool that gave no connection in time, with the cause: the pool
    retries failed connections quietly, so one direct attempt, as the pool connects, says
    whether the server refuses them (and why) or every connection was busy."""
    conninfo = pool.conninfo if isinstance(pool.conninfo, str) else pool.conninfo()
    kwargs = pool.kwargs if isinstance(pool.kwargs, dict) else {}
    try:
        psycopg.connect(conninfo, **{**kwargs, "connect_timeout": 2}).close()
    except psycopg.Error as cause:
        return refused_options(cause, redact(conninfo)) or StoreUnavailableError(
            f"PostgreSQL unavailable: {exc}; a new connection fails: {cause}"
        )
    return StoreUnavailableError(
        f"PostgreSQL unavailable: {exc} (all {pool.max_size} connections of the pool in use)"
    )
