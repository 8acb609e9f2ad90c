"""What a SQL dialect fills in, and the rows it reads back: the hooks every SQL part of the store
is written against (`SQLDialect`), shared by SQLite and PostgreSQL.

A dialect (`SQLiteStore`, `PostgresStore`) supplies only what differs between the databases:

- plumbing: how to open a connection, run a write transaction (`BEGIN IMMEDIATE` versus a
  pooled connection's transaction), translate driver errors, apply migrations;
- the parameter marker (SQL is written with `?`; a dialect's `_exec` rewrites it);
- how values are passed and read back (`_t`/`_ms` for times: epoch milliseconds in SQLite's
  integer columns, `timestamptz` in PostgreSQL; `_j`/`_load` for JSON: text versus `jsonb`;
  `_id` checks a run id before it reaches a `uuid` column);
- small SQL fragments (`_TEXT_ID`, `_FOR_UPDATE`, `_JSON_VERSION`, `_STATUS_GROUP`).

The parts of the store (`runs`, `inbox`, `steps`, `leases`, `calls`, `capacity`, `lifecycle`,
`run_queries`, `coordination`, `reencrypt`) each subclass it, so that they are type-checked
against the same class tree that runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from persistence.stores.codec import Column, PayloadCodecError, open_payload, shown_sealed
from persistence.stores.protocol import PayloadCodec
from persistence.stores.queries import parse_run
from persistence.stores.records import (
    DeadLetter,
    EffectRecord,
    InboxEvent,
    RunRecord,
)
from persistence.stores.rules import (
    PRIORITY_AGING_MS,
    SEALED,
)
from persistence.wakeup import Wakeup, shared_wakeup

RUN_NAMES = (
    "id, workflow_name, workflow_version, key, state, snapshot, status, attempt_count, "
    "created_at, updated_at, completed_at, failed_at, last_error, wake_at, lease_owner, "
    "lease_expires_at, version, claim_count, traceparent, parent_run_id, parent_invoke_id, "
    "priority, waiting_for"
)
EFFECT_NAMES = (
    "idempotency_key, run_id, step, effect_index, kind, payload, status, result, error, "
    "created_at, updated_at"
)
RUN_TIME_FIELDS = (8, 9, 10, 11, 13, 15)
"""Positions of the time columns in `RUN_NAMES` (converted by a dialect's `_ms`)."""
INBOX_NAMES = "id, run_id{t}, event, created_at, traceparent"

DEAD_NAMES = "id, run_id{t}, event, created_at, dead_at, dead_reason"


class SQLDialect:
    """The hooks a dialect fills in, and decoding of rows through them."""

    dialect: str
    url: str
    _TEXT_ID = ""
    """SQL appended to a run-id column to read it as text (PostgreSQL: `::text` of a uuid)."""
    _FOR_UPDATE = ""
    """Row lock of a read-then-write inside a transaction (SQLite's write lock covers it)."""
    _LOCK_ROW = ""
    """Row lock of a run read to be written in the same transaction, which other writers of
    the row wait for but inserts of its inbox, outbox and journal rows do not (PostgreSQL
    `FOR NO KEY UPDATE`; SQLite's write lock covers it)."""
    _SKIP_LOCKED = ""
    """Row lock of a queue's head taken by one transaction of many, skipping the rows others
    have locked (PostgreSQL `FOR UPDATE SKIP LOCKED`; SQLite's write lock serializes)."""
    _JSON_VERSION = ""
    """SQL for the snapshot's `version` label, NULL when the snapshot does not parse."""
    _SEALED_KEY = ""
    """SQL for the key id of a sealed payload in `{column}`, NULL when it is in clear (or not
    JSON)."""
    _AGED = f"{{time}} - priority * {PRIORITY_AGING_MS}"
    """SQL of a run's time `{time}` aged by its priority (`PRIORITY_AGING_MS`): the order of
    claims, and of a limit's queue."""
    _CLAIM_ORDER = _AGED.format(time="wake_at")
    """The claim order of due runs, as the claim index spells it."""
    _STATUS_GROUP = "status"
    """Expression to group a filtered count by status (SQLite: `+status` keeps the planner on
    the state index)."""
    _AS_ID = "{}"
    """SQL of a text expression (a `parent_run_id`) as a run id, so that the id index serves
    the comparison (PostgreSQL: a cast to `uuid`)."""
    _LOCK_TREE = ""
    """A statement after `_RUN_TREE` that serializes systemId registrations in one run tree
    until the transaction ends (PostgreSQL: an advisory lock on the root's id; SQLite's write
    lock already serializes every writer)."""

    _LOCK_KEY = ""
    """A statement (workflow name and key as parameters) that serializes the starts of one key
    until the transaction ends (PostgreSQL: an advisory lock on their hashes; SQLite's write
    lock already serializes every writer)."""

    RUN_COLUMNS: str
    EFFECT_COLUMNS: str

    _NOTIFY = ""
    """SQL appended to the `RETURNING` list of an inbox insert to wake idle workers in other
    processes when it commits, naming the event's run (PostgreSQL: `pg_notify`; SQLite has no
    other process to tell)."""
    _own_wakeup: Wakeup | None = None
    """A `Wakeup` of this store object alone (an in-memory database is not shared)."""

    _INTEGRITY_ERRORS: tuple[type[Exception], ...] = ()
    _CREATE_IS_ONE_STATEMENT = False
    """True where `_create_in` is one statement (PostgreSQL's CTE), so a lone create needs no
    transaction of its own."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.RUN_COLUMNS = RUN_NAMES.replace("id,", f"id{cls._TEXT_ID},", 1)
        cls.EFFECT_COLUMNS = EFFECT_NAMES.replace("run_id", f"run_id{cls._TEXT_ID}")

    def wakeup(self) -> Wakeup:
        """The signal idle workers of this database wait on (`persistence.wakeup`)."""
        return self._own_wakeup or shared_wakeup(self.url)

    def _write(self) -> AbstractContextManager[Any]:
        """A connection inside one write transaction, committed on exit, rolled back on error."""
        raise NotImplementedError

    def _pipelined_write(self) -> AbstractContextManager[Any]:
        """`_write` whose statements are sent together until a result is fetched (PostgreSQL
        pipeline mode: BEGIN rides with the first statements, COMMIT with the last)."""
        return self._write()

    def _notify_in(self, conn: Any, run_id: str | None) -> None:
        """Wake idle workers of other processes when the open transaction commits, naming
        `run_id` (a queued event) or no run (work due: a claim finds it); see `_NOTIFY`."""

    def _connection(self) -> AbstractContextManager[Any]:
        """A connection for reads (no transaction of its own)."""
        raise NotImplementedError

    def _exec(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run `sql` (written with `?` markers) on `conn`; the driver's cursor."""
        return conn.execute(sql, params)

    def _many(self, conn: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run `sql` once per parameter row."""
        if rows:
            conn.cursor().executemany(sql, rows)

    def _t(self, ms: int | None) -> Any:
        """A time parameter (epoch ms in, the column's type out)."""
        return ms

    def _ms(self, value: Any) -> Any:
        """A time column read back as epoch ms."""
        return value

    def _j(self, value: Any) -> Any:
        """A JSON parameter."""
        raise NotImplementedError

    def _load(self, value: Any) -> Any:
        """A JSON column read back as a value."""
        return value

    _ring: PayloadCodec | None = None

    _show_sealed = False

    def use_codec(self, ring: PayloadCodec | None, *, show_sealed: bool = False) -> None:
        """Seal the payload columns this store writes with `ring`'s current key, and open
        sealed ones with any of its keys (`persistence.stores.codec`); None writes them in
        clear. With `show_sealed` (the UI, `runs show`), a payload whose key is missing reads
        as a marker saying so, instead of raising `PayloadKeyError`."""
        self._ring, self._show_sealed = ring, show_sealed

    def _seal(self, value: Any, run_id: str, column: str) -> Any:
        """A payload column's parameter: `value` as JSON, sealed when a key ring is set."""
        ring = self._ring
        return self._j(value if ring is None else ring.seal(value, run_id, column))

    def _open(self, value: Any, run_id: str, column: str) -> Any:
        """A payload column read back: its value, opened if it is sealed."""
        value = self._load(value)
        if type(value) is not dict or SEALED not in value:  # (in clear: one check)
            return value
        try:
            return open_payload(self._ring, value, run_id, column)
        except PayloadCodecError as exc:
            if self._show_sealed:
                return shown_sealed(exc)
            raise

    def _id(self, run_id: str) -> str:
        """A run id as a parameter (dialects with typed ids validate it here)."""
        return run_id

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._connection() as conn:
            return list(self._exec(conn, sql, params).fetchall())

    def _read_all(self, queries: Sequence[tuple[str, Sequence[Any]]]) -> list[list[Any]]:
        """Several reads on one connection (PostgreSQL pipelines them into one round trip)."""
        with self._connection() as conn:
            return [list(self._exec(conn, sql, params).fetchall()) for sql, params in queries]

    def _statement_write(self) -> AbstractContextManager[Any]:
        """A connection for a write this dialect does in one statement (PostgreSQL: autocommit,
        no BEGIN/COMMIT round trips; SQLite: its write transaction)."""
        return self._write()

    def _write_one(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """One statement as its own transaction; its rows."""
        with self._statement_write() as conn:
            return list(self._exec(conn, sql, params).fetchall())

    def _tell_waiters_in(self, conn: Any, run_id: str) -> None:
        """Wake whoever waits on run `run_id` (`watch`) when the open transaction commits a
        change of it (PostgreSQL: a NOTIFY if the run has a waiter; SQLite: nothing, its
        waiters read again)."""

    def watch(self, run_id: str, seconds: float) -> bool:
        """Ask for a wake-up (`Wakeup.progressed`) at each step of the run committed by any
        process until `unwatch` (at most `seconds`): True where the store can (PostgreSQL,
        once its listener listens); False where the waiter must read again on its own."""
        del run_id, seconds
        return False

    def unwatch(self, run_id: str) -> None:
        """Stop `watch`ing the run."""

    def _run(
        self, row: Sequence[Any], previous_owner: str | None = None, due_at: Any = None
    ) -> RunRecord:
        """A run row (`RUN_COLUMNS`) as a record; on a claim, with the lease owner it was taken
        from and when it was due (`due_at` as the column's value, before the claim)."""
        values = list(row)
        for i in RUN_TIME_FIELDS:
            values[i] = self._ms(values[i])
        return parse_run(values, self._load, previous_owner, self._ms(due_at), self._opener)

    def _opener(self, value: Any, run_id: str) -> Any:
        """A sealed snapshot opened (`parse_run` makes a `PayloadCodecError` the row's
        problem: the run is shown so, and failed by its next claim)."""
        return open_payload(self._ring, value, run_id, Column.SNAPSHOT)

    def _effect(self, row: Sequence[Any]) -> EffectRecord:
        values = list(row)
        values[5] = self._open(values[5], values[1], Column.EFFECT_PAYLOAD)
        values[7] = (
            None if values[7] is None else self._open(values[7], values[1], Column.EFFECT_RESULT)
        )
        values[9], values[10] = self._ms(values[9]), self._ms(values[10])
        return EffectRecord(*values)

    def _inbox(self, row: Sequence[Any]) -> InboxEvent:
        i, r, e, c, tp = row
        return InboxEvent(i, r, self._open(e, r, Column.EVENT), self._ms(c), tp)

    def _dead(self, row: Sequence[Any]) -> DeadLetter:
        i, r, e, c, d, why = row
        return DeadLetter(i, r, self._open(e, r, Column.EVENT), self._ms(c), self._ms(d), why)
