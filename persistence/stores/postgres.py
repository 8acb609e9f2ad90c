"""PostgreSQL dialect: psycopg 3 with a psycopg-pool connection pool, `jsonb` snapshots.

The SQL is `persistence.stores.sql`'s, shared with SQLite; this module holds what PostgreSQL does
differently: the dialect's hooks and its hot paths' overrides. Their statements are in
`postgres_statements`, its values (times, JSON, uuids) in `postgres_values`, its connection
handling (pool checkout, kept cursors, errors, the wake-up listener) in `postgres_connections`.
Hot paths are single SQL statements (data-modifying CTEs) run in autocommit mode, so a worker's
round of steps, one step of each run it holds, costs one round trip and one commit. Claims use
`FOR UPDATE SKIP LOCKED`, so many workers on many machines share the table without blocking
each other.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg_pool
from psycopg.types.json import Jsonb

from persistence import schema
from persistence.stores.clocks import StoreClock, server_clock
from persistence.stores.codec import Column, PayloadCodecError
from persistence.stores.conflicts import retried
from persistence.stores.errors import (
    ConflictError,
    RunNotFoundError,
)
from persistence.stores.planners import PlanT, Sent, StepPlanner
from persistence.stores.poolers import Pooling
from persistence.stores.postgres_connections import (
    IDLE,
    SCHEMA_NAME,
    Checkout,
    Listener,
    RecentFirstPool,
    configure_json,
    create_schema,
    encoded,
    execute,
    execute_hot,
    redact,
)
from persistence.stores.postgres_statements import (
    CHANNEL,
    CREATE_RUN,
    CREATE_RUN_WITH_CALLS,
    CREATE_RUNS,
    LEASED_WORK,
    LOCK_RUNS,
    PROCESS,
    PROGRESS,
    READ_WORK,
    RENEW_CALLS,
    VERSION_PAIRS,
    finish_burst_statement,
    from_rest_statement,
    has_extras,
    heartbeat_sql,
    lease_params,
    lease_sql,
    psycopg_style,
    seal_rows,
    steps_statement,
    wakes_now,
)
from persistence.stores.postgres_values import (
    canonical_id,
    json_param,
    to_ms,
    to_ts,
    uuid_array,
    uuid_text,
)
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
    check_distinct_runs,
    check_status,
    check_unkeyed,
    completion_times,
    idempotency_key,
    is_call,
    unowned_calls,
)
from persistence.stores.sql import SQLStore
from persistence.wakeup import Wakeup, shared_wakeup

log = logging.getLogger("statecharts.store")

_FromRest = tuple[int, RunRecord, Mapping[str, Any], str | None, CallFinish | None]
"""A sent event to step from rest: (its index, the run at rest, the event, its traceparent, the
call end it is the result of)."""


_SERVER_TIME = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
"""The database server's clock in epoch ms: the anchor of the store clock."""


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
    _AS_ID = "CAST({} AS uuid)"
    _LOCK_TREE = (
        "SELECT pg_advisory_xact_lock(hashtextextended(id::text, 18)) FROM up WHERE parent IS NULL"
    )
    # (the two-key form: a lock space apart from `_LOCK_TREE`'s one-key locks)
    _LOCK_KEY = "SELECT pg_advisory_xact_lock(hashtext(?), hashtext(?))"
    _JSON_VERSION = "snapshot->>'version'"
    _SEALED_KEY = "{column}->>'$enc'"
    _AGED = "statecharts_claim_order({time}, priority)"  # migration 0005
    _CLAIM_ORDER = _AGED.format(time="wake_at")
    _CREATE_IS_ONE_STATEMENT = True
    _NOTIFY = f", pg_notify({CHANNEL}, '{PROCESS}:' || run_id::text)"

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
        if schema is not None and not SCHEMA_NAME.match(schema):
            raise ValueError(f"schema name must match {SCHEMA_NAME.pattern}: {schema!r}")
        self.schema = schema
        self.pooling = Pooling(pooler, schema)
        self._listener: Listener | bool | None = None  # (False: none, `_listen`)
        self._listener_lock = threading.Lock()
        self._clock: StoreClock | None = None
        self._listen_dsn = listen_dsn
        kwargs = self.pooling.connect_kwargs()
        if pool is None:
            assert dsn is not None
            self.url = redact(dsn)
            if schema is not None:
                create_schema(dsn, schema, kwargs, self.url)
            self._pool: psycopg_pool.ConnectionPool[Any] = RecentFirstPool(
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
        """A connection's set-up: JSON (`configure_json`), then the pooler's
        (`Pooling.configure`)."""
        configure_json(conn)
        self.pooling.configure(conn)

    # -- plumbing ---------------------------------------------------------------------------
    def _connection(self) -> Checkout:
        """A pooled connection; connection trouble becomes `StoreUnavailableError`."""
        return Checkout(
            self._pool, None if self._owns_pool else self._configure_new, self.pooling.begin
        )

    _conn = _connection

    @contextmanager
    def _write(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection inside one transaction."""
        with self._connection() as conn, conn.transaction():
            yield conn

    def _exec(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        return conn.execute(encoded(psycopg_style(sql)), params) if params else conn.execute(sql)

    def _many(self, conn: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            conn.cursor().executemany(psycopg_style(sql), rows)

    def _statement_write(self) -> Any:
        return self._connection()

    def _rows(self, sql: str, params: Any = ()) -> list[Any]:
        """psycopg-style SQL (`%s` markers) as one autocommitted statement."""
        with self._connection() as conn:
            return execute(conn, sql, params).fetchall()

    def _read_all(self, queries: Sequence[tuple[str, Sequence[Any]]]) -> list[list[Any]]:
        with self._connection() as conn:
            with conn.pipeline():
                cursors = [
                    conn.execute(encoded(psycopg_style(sql)), params) for sql, params in queries
                ]
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
        return uuid_text(run_id)

    @retried
    def heartbeat(self, owner: str, run_ids: Collection[str], now: int, lease_ms: int) -> set[str]:
        """Extend the caller's leases without waiting for a row lock. A row locked now is being
        committed by its owner's step (which writes its own lease), so it is skipped yet counted
        as kept: waiting for it instead could deadlock against a batch commit that locks the
        same rows in another order (seen under the load test: the step's calls then ran twice).
        """
        if not run_ids:
            return set()
        ids = [uuid_text(i) for i in run_ids]
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
        for name, version in self._read(VERSION_PAIRS):
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
        if not isinstance(listener, Listener) or not listener.listening.wait(5.0):
            return False
        # (the row's update waits out a step being written now; a step after it sees it)
        counted = self._rows(
            "UPDATE workflow_runs SET waiters = CASE WHEN waited_until > now() THEN waiters + 1 "
            "ELSE 1 END, waited_until = greatest(waited_until, now() + %s * interval '1 ms') "
            "WHERE id = %s RETURNING 1",
            (int(seconds * 1000), uuid_text(run_id)),
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
            (uuid_text(run_id),),
        )

    def _tell_waiters_in(self, conn: Any, run_id: str) -> None:
        conn.execute(
            f"SELECT pg_notify({CHANNEL}, '{PROGRESS}:' || id::text) FROM "
            "workflow_runs WHERE id = %s AND waiters > 0 AND waited_until > now()",
            (uuid_text(run_id),),
        )

    def _listen(self, wakeup: Wakeup) -> Listener | None:
        """The listener of this store's wake-ups: on `listen_dsn` if given, else on the store's
        own DSN; none behind a transaction pooler, which cannot carry `LISTEN` (other
        processes' work is then found by polling). Without `pooler=`, the listener checks
        for a pooler itself (`Listener`)."""
        path = self.pooling.listen_path()
        if self._listen_dsn is not None:
            return Listener(self._listen_dsn, {"autocommit": True}, path, wakeup, False)
        if self.pooling.mode == "transaction":
            log.info(
                "behind a transaction pooler with no listen_dsn: other processes' "
                "starts and events are found by polling"
            )
            return None
        return Listener(self._conninfo, self._kwargs, path, wakeup, self.pooling.mode is None)

    def clock(self) -> StoreClock:
        """The database server's clock (`clocks.server_clock`), anchored when first asked."""
        with self._listener_lock:
            if self._clock is None:
                self._clock = server_clock(lambda: int(self._rows(_SERVER_TIME)[0][0]))
            return self._clock

    def close(self) -> None:
        """Stop the wake-up listener; close the pool if this store created it."""
        with self._listener_lock:
            if isinstance(self._listener, Listener):
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
        query, params = self._start_statement(run, effects, now)
        # A racing insert of the same key makes ON CONFLICT skip while our snapshot cannot yet
        # see the winner; the second attempt sees it.
        for _ in range(3):
            row = execute_hot(conn, query, params, binary=True).fetchone()
            if row is not None:
                record, created = self._started(run, row)
                if created:
                    self._share_of(conn, run)
                return record, created
        raise ConflictError(f"could not insert or find run with key {run.key!r}")

    @retried
    def create_runs(
        self, runs: Sequence[tuple[NewRun, Sequence[NewEffect]]], now: int
    ) -> list[RunRecord]:
        """`SQLStore.create_runs` as one statement (`CREATE_RUNS`): one round trip, one
        commit and one plan for the batch. Runs that need more than their one statement
        (search attributes, deliveries, a limit's share) go the generic way."""
        check_unkeyed(runs)
        if any(run.search or run.deliveries or run.limit_share for run, _ in runs):
            return super().create_runs(runs, now)
        rows = [self._start_row(run, effects, now) for run, effects in runs]
        with self._write() as conn:
            found = execute_hot(
                conn, CREATE_RUNS, {"runs": json_param(rows), "now": now}, binary=True
            ).fetchall()
        inserted = {row[0]: (*row[:-1], True) for row in found}  # (as `_started` reads one)
        records = [self._started(run, inserted[row["id"]])[0] for (run, _), row in zip(runs, rows)]
        self._tell_started(runs, now)
        return records

    def _started(self, run: NewRun, row: Any) -> tuple[RunRecord, bool]:
        """The start statement's row: the run (as inserted, or the key's holder) and whether
        it was inserted."""
        values, created = list(row[:-1]), bool(row[-1])
        if created:  # (the snapshot inserted is not sent back: parsing it cost more)
            values[5] = run.snapshot
        return self._run(values), created

    def _start_statement(
        self, run: NewRun, effects: Sequence[NewEffect], now: int
    ) -> tuple[str, dict[str, Any]]:
        """A start's one statement (the run, its effects and calls) and its parameters."""
        params = self._start_row(run, effects, now)
        params.update(
            key=run.key,
            now=now,
            snapshot=json_param(params["snapshot"]),
            effects=json_param(params["effects"]),
        )
        calls = params.pop("calls")
        if not calls:
            return CREATE_RUN, params
        params.update(calls=json_param(calls), unowned=params["call_owner"] is None)
        return CREATE_RUN_WITH_CALLS, params

    def _start_row(self, run: NewRun, effects: Sequence[NewEffect], now: int) -> dict[str, Any]:
        """A start's values (its run, its effects' and calls' rows, their payloads sealed
        where a codec is set), as `CREATE_RUN` takes them and `CREATE_RUNS` reads a row."""
        check_status(run.status)
        completed_at, failed_at = completion_times(run.status, now)
        rid = canonical_id(run.id)
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
            seal_rows({"effects": effects_rows, "calls": calls}, self._ring, rid)
        owner, until = run.call_lease if run.call_lease is not None else (None, None)
        return {
            "id": rid,
            "name": run.workflow_name,
            "wv": run.workflow_version,
            "state": run.state,
            "snapshot": snapshot,
            "status": run.status,
            "attempts": run.attempt_count,
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
            "effects": effects_rows,
            "calls": calls,
            "call_owner": owner,
            "call_lease": until,
        }

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
                cursor = conn.execute(lease_sql(pairs is not None, self._CLAIM_ORDER), params)
                found = conn.execute(LEASED_WORK, params) if with_work else None
            rows = cursor.fetchall()
            work_rows = found.fetchall() if found is not None else None
        return self._leased(rows, work_rows)

    def _leased(
        self, rows: list[Any], work_rows: list[Any] | None
    ) -> tuple[list[RunRecord], dict[str, PendingWork]]:
        """The runs a claim statement (`lease_sql`) returned, with their work read by
        `_LEASED_WORK` (None: not read)."""
        runs = [self._run(r[:-2], r[-2], r[-1]) for r in rows]
        if work_rows is None:
            return runs, {}
        items = {run_id: (effects, inbox) for run_id, effects, inbox in work_rows}
        return runs, {run.id: self._pending(run.id, *items[run.id]) for run in runs}

    def read_work(self, run_ids: Collection[str]) -> list[tuple[RunRecord, PendingWork]]:
        """The existing runs among `run_ids` with their pending work, in one statement and
        no lease (a plain read: no row lock, no commit to wait for)."""
        ids = [uuid_text(i) for i in run_ids]
        if not ids:
            return []
        rows = self._rows(READ_WORK, {"ids": ids})
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
            if not any(has_extras(c) for c in commits):  # the hot path: one statement
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
        ids = [uuid_text(commit.run_id) for commit in commits]
        written = {
            r[0]: r[1] for r in execute_hot(conn, *steps_statement(commits, ids, now, self._ring))
        }
        for commit in commits:  # (rare: a run failed, or has child runs)
            if has_extras(commit) and uuid_text(commit.run_id) in written:
                for run, _ in commit.start_runs:
                    check_status(run.status)
                self._step_extras_in(conn, commit, now, cancelled)
        return [written.get(run_id) for run_id in ids]

    def _commit_later_in(
        self, conn: Any, commit: StepCommit, now: int, cancelled: list[str]
    ) -> Callable[[], int | None]:
        if has_extras(commit):  # (they need to know it was written)
            return super()._commit_later_in(conn, commit, now, cancelled)
        run_id = uuid_text(commit.run_id)
        sql, params = steps_statement([commit], [run_id], now, self._ring)
        cursor = conn.execute(encoded(sql), params)
        return lambda: {r[0]: r[1] for r in cursor.fetchall()}.get(run_id)

    @contextmanager
    def _pipelined_write(self, implicit: bool = False) -> Iterator[psycopg.Connection[Any]]:
        """One transaction in pipeline mode: statements go out together until a result is
        fetched, BEGIN with the first ones and COMMIT with the last (plain statements: a
        psycopg `transaction()` block would wait for its BEGIN, and sync before its COMMIT,
        each a round trip of its own). `implicit` (a write of plain statements, no
        `transaction()` inside: the steps from rest): no BEGIN or COMMIT at all, the
        statements one transaction until the pipeline's closing Sync, which commits them (the
        protocol's implicit transaction block, where PostgreSQL refuses a SAVEPOINT). Whatever
        fails, the transaction is rolled back once the pipeline has synced."""
        with self._connection() as conn:
            # (behind a transaction pooler the checkout's transaction is already open, and
            # the checkout commits it)
            own = not implicit and conn.info.transaction_status == IDLE
            try:
                with conn.pipeline():  # (BEGIN and COMMIT on the kept cursor: not read)
                    if own:
                        execute(conn, "BEGIN", None)
                    yield conn
                    if own:
                        execute(conn, "COMMIT", None)
            except BaseException:
                conn.rollback()
                raise

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
        """`SQLStore.send_and_step`; with `rest`, first the step from rest in one round trip
        (`_step_from_rest`), and only if it was not written the locked read and the step."""
        if rest is not None and uuid_text(rest.id) == uuid_text(run_id):
            written = self._step_from_rest(rest, event, now, planner, traceparent, finish)
            if written is not None:
                return written
        return super().send_and_step(
            run_id,
            event,
            now,
            planner,
            traceparent=traceparent,
            cancelled=cancelled,
            finish=finish,
        )

    @retried
    def finish_calls(
        self,
        ends: Sequence[tuple[CallFinish, str, Mapping[str, Any]]],
        now: int,
        planner: StepPlanner[PlanT],
        cancelled: list[str] | None = None,
        rests: Mapping[str, RunRecord] | None = None,
    ) -> list[Sent[PlanT]]:
        """`SQLStore.finish_calls`; first every end whose run is in `rests` as its step from
        rest, all of them in one transaction of two statements (`_finish_burst_from_rest`):
        one round trip and one commit for the burst; the ends whose steps were not written
        (the run moved on, or none was tried) then as `SQLStore.finish_calls` writes them."""
        known = rests or {}
        tried = [
            (i, known[run_id], event, None, finish)
            for i, (finish, run_id, event) in enumerate(ends)
            if run_id in known and uuid_text(known[run_id].id) == uuid_text(run_id)
        ]
        written = self._finish_burst_from_rest(tried, now, planner)
        left = [end for i, end in enumerate(ends) if i not in written]
        others = iter(super().finish_calls(left, now, planner, cancelled) if left else [])
        return [written[i] if i in written else next(others) for i in range(len(ends))]

    def _step_from_rest(
        self,
        rest: RunRecord,
        event: Mapping[str, Any],
        now: int,
        planner: StepPlanner[PlanT],
        traceparent: str | None,
        finish: CallFinish | None = None,
    ) -> Sent[PlanT] | None:
        """The sent event's step planned from `rest`, written only if the run is still at
        rest at that version (`_FROM_REST_RUN`), in one round trip (`_steps_from_rest`); None
        when the step was not written (nothing was) or not tried."""
        from_rest = (0, rest, event, traceparent, finish)
        return self._steps_from_rest([from_rest], now, planner).get(0)

    def _steps_from_rest(
        self, sends: Sequence[_FromRest], now: int, planner: StepPlanner[PlanT]
    ) -> dict[int, Sent[PlanT]]:
        """Each sent event's step planned from its run's `rest`, written only if the run is
        still at rest at that version (`_FROM_REST_RUN`), all in one round trip: one step is
        one statement in autocommit, a burst's are pipelined as one transaction. Each locks
        its run's row before it checks that nothing is queued or pending for it
        (`statecharts_still_at_rest`, schema 15), with a snapshot taken after the lock: it
        then sees the event that a sender holding the row before it queued (the statement's
        own snapshot, taken before it waited, would not: a row another transaction only
        locked is not re-checked once it is let go). Not tried: no step, or one with child
        runs or deliveries (those are written by statements that need the run's write to
        have matched). The written ones by their index."""
        planned = [
            (i, plan, *from_rest_statement(plan.commit, rest, now, self._ring, finish))
            for i, plan, rest, finish in self._planned_from_rest(sends, now, planner)
        ]
        if not planned:
            return {}
        if len(planned) == 1:  # (one statement in autocommit: no pipeline to enter and sync)
            with self._statement_write() as conn:
                i, plan, sql, params = planned[0]
                sent_all = [(i, plan, params, execute_hot(conn, sql, params).fetchall())]
        else:
            sent_all = self._pipelined_from_rest(planned)
        return self._written_from_rest(
            [(i, plan, rows[0] if rows else None) for i, plan, _, rows in sent_all], now
        )

    def _written_from_rest(
        self, results: Sequence[tuple[int, PlanT, Any]], now: int
    ) -> dict[int, Sent[PlanT]]:
        """The steps from rest whose statements wrote their runs (each with its result row,
        run id, version and inbox id; None: not written), by index; this process's workers
        woken where one left its run due at once."""
        written = {i: Sent(int(row[2]), int(row[1]), plan) for i, plan, row in results if row}
        if any(wakes_now(sent.plan.commit, now) for sent in written.values() if sent.plan):
            self.wakeup().notify()
        return written

    def _planned_from_rest(
        self, sends: Sequence[_FromRest], now: int, planner: StepPlanner[PlanT]
    ) -> list[tuple[int, PlanT, RunRecord, CallFinish | None]]:
        """Each sent event's step planned from its run's `rest`, those a statement from rest
        can write: an unleased step that releases the run, executed nothing and has no child
        runs or deliveries (those are written by statements that need the run's write to have
        matched). With their indexes, rows of rest and call ends."""
        planned: list[tuple[int, PlanT, RunRecord, CallFinish | None]] = []
        for i, rest, event, traceparent, finish in sends:
            sent = InboxEvent(0, rest.id, dict(event), now, traceparent)
            plan = planner.plan(rest, PendingWork([], [sent]))
            commit = None if plan is None else plan.commit
            if (
                plan is None
                or commit is None
                or not (commit.unleased and commit.release)
                or commit.effect_outcomes
                or has_extras(commit)
            ):
                continue
            check_status(commit.status)
            planned.append((i, plan, rest, finish))
        return planned

    def _finish_burst_from_rest(
        self, sends: Sequence[_FromRest], now: int, planner: StepPlanner[PlanT]
    ) -> dict[int, Sent[PlanT]]:
        """`_steps_from_rest` for a burst of call ends (each send with its `finish`), in two
        statements however many: the runs' rows locked (in one lock order, by a statement of
        their own for the reason `_steps_from_rest` gives), then every step with its call's
        end in one statement (`finish_burst_statement`), each run written only under its own
        fence; BEGIN-less, pipelined, committed by the pipeline's Sync. The written ones by
        their index."""
        planned = [
            (i, plan, rest, finish)
            for i, plan, rest, finish in self._planned_from_rest(sends, now, planner)
            if finish is not None
        ]
        if not planned:
            return {}
        steps = [(plan.commit, rest, finish) for _, plan, rest, finish in planned]
        sql, params = finish_burst_statement(steps, now, self._ring)
        ids = sorted(uuid_text(rest.id) for _, _, rest, _ in planned)
        with self._pipelined_write(implicit=True) as conn:
            execute_hot(conn, LOCK_RUNS, (uuid_array(ids),))  # (never read)
            cursor = execute_hot(conn, sql, params)
        rows = {row[0]: row for row in cursor.fetchall()}
        return self._written_from_rest(
            [(i, plan, rows.get(uuid_text(rest.id))) for i, plan, rest, _ in planned], now
        )

    def _pipelined_from_rest(
        self, planned: list[tuple[int, PlanT, str, dict[str, Any]]]
    ) -> list[tuple[int, PlanT, dict[str, Any], list[Any]]]:
        """A burst's steps from rest pipelined as one transaction (the protocol's implicit
        one, committed by the pipeline's Sync: no BEGIN or COMMIT), in one lock order (each
        statement locks its run: `statecharts_still_at_rest`); each with its result's rows."""
        planned = sorted(planned, key=lambda p: str(p[3]["id"]))
        with self._pipelined_write(implicit=True) as conn:
            sent_all, hot = [], set()
            for i, plan, sql, params in planned:
                if sql in hot:  # (each result is read after the pipeline: a cursor each)
                    cursor = conn.execute(encoded(sql), params)
                else:  # its adapters kept from the last step (`execute_hot`)
                    hot.add(sql)
                    cursor = execute_hot(conn, sql, params)
                sent_all.append((i, plan, params, cursor))
        return [(i, plan, params, cursor.fetchall()) for i, plan, params, cursor in sent_all]

    def _renew_calls_in(
        self, conn: Any, owner: str, sealed: Mapping[str, Any], ts: Any, expires: Any
    ) -> set[str]:
        """`SQLCalls._renew_calls_in` in one statement that skips the rows another
        transaction has locked (`RENEW_CALLS`): a heartbeat never waits. It waited for the
        call rows of a burst of ends being written (locked in the burst's order, while the
        heartbeat took them in its own), the two deadlocked, and a heartbeat held up for the
        deadlock timeout let leases run out under load: other workers took calls still
        running. A skipped call is reported as still held when its last committed row says
        so (the writer that holds it decides; the next heartbeat sees what it decided)."""
        keys = list(sealed)
        params = {"owner": owner, "ts": ts, "expires": expires, "keys": keys}
        params["details"] = [sealed[key] for key in keys]
        return {row[0] for row in conn.execute(encoded(RENEW_CALLS), params)}

    def _wake_listener(self) -> None:
        """One NOTIFY on the wake-up channel, so that a closing listener stops waiting now
        (else `close` would wait out its poll of the connection)."""
        with self._connection() as conn:
            self._notify_in(conn, None)

    def _notify_in(self, conn: Any, run_id: str | None) -> None:
        payload = PROCESS if run_id is None else f"{PROCESS}:{run_id}"
        conn.execute(f"SELECT pg_notify({CHANNEL}, %s)", (payload,))
