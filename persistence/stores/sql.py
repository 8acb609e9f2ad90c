"""The SQL store, written once: every `Store` method as SQL text shared by SQLite and PostgreSQL.

A dialect (`SQLiteStore`, `PostgresStore`) supplies only what differs between the databases:

- plumbing: how to open a connection, run a write transaction (`BEGIN IMMEDIATE` versus a
  pooled connection's transaction), translate driver errors, apply migrations;
- the parameter marker (SQL here is written with `?`; a dialect's `_exec` rewrites it);
- how values are passed and read back (`_t`/`_ms` for times: epoch milliseconds in SQLite's
  integer columns, `timestamptz` in PostgreSQL; `_j`/`_load` for JSON: text versus `jsonb`;
  `_id` checks a run id before it reaches a `uuid` column);
- small SQL fragments (`_TEXT_ID`, `_FOR_UPDATE`, `_JSON_VERSION`, `_STATUS_GROUP`);
- the hot paths a dialect does in fewer round trips (`claim_runs` with `SKIP LOCKED` and
  `claim_work` reading the pending work in the claim's round trip,
  PostgreSQL's one-statement `commit_steps` and `_create_in`, `_read_all` pipelined).

The rules (which runs are claimable, dead-letter reasons, the key format, completion times)
live in `rules.py`, the runs list's WHERE clause ("stuck" among its filters) in `queries.py`,
above every dialect.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

from persistence import schema
from persistence.stores.calls import SQLCalls
from persistence.stores.capacity import SQLCapacity
from persistence.stores.codec import Column, PayloadCodecError, open_payload, shown_sealed
from persistence.stores.conflicts import retried
from persistence.stores.errors import ConflictError, RunFinishedError, RunNotFoundError
from persistence.stores.lifecycle import SQLLifecycle
from persistence.stores.protocol import PayloadCodec
from persistence.stores.queries import known_status, parse_run, run_query_sql
from persistence.stores.records import (
    ACTIVE,
    BreakerRecord,
    CallFinish,
    ClaimRecord,
    DeadLetter,
    Delivery,
    EffectOutcome,
    EffectRecord,
    EventProgress,
    EventRecord,
    InboxEvent,
    NewEffect,
    NewRun,
    PendingWork,
    RunQuery,
    RunRecord,
    ScheduleRecord,
    StepCommit,
    VersionCount,
)
from persistence.stores.reencrypt import SQLReencrypt
from persistence.stores.rules import (
    CLAIMABLE,
    CLAIMABLE_BY_EVENT,
    FAILED_EVENT,
    MAX_SKIP_RECORDS,
    PRIORITY_AGING_MS,
    RESUME_EVENT,
    SEALED,
    STOPPED_BY_END,
    STOPPED_BY_EXIT,
    cancel_event,
    check_distinct_runs,
    check_group_column,
    check_last,
    check_status,
    child_ended_event,
    completion_times,
    ended_reason,
    idempotency_key,
    is_call,
    only_version,
    unowned_calls,
)
from persistence.wakeup import Wakeup, shared_wakeup
from statecharts.errors import SystemIdTakenError

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
_INBOX = "id, run_id{t}, event, created_at, traceparent"
_SCHEDULE_COLUMNS = "name, last_fire_at, version, last_run_id, buffered_at, skipped_count, skipped"

_QUEUE_EVENT = (
    "INSERT INTO workflow_inbox (run_id, event, created_at, traceparent, call_key) "
    "SELECT id, ?, ?, ?, ? FROM workflow_runs WHERE id = ? AND status = 'active' "
    "RETURNING id"
)
"""Queue an event for a run that is still active (`send_event`, `send_and_step`)."""

JOURNAL_INSERT = (
    "INSERT INTO workflow_events (run_id, step, event, state_before, state_after, "
    "created_at, inbox_id, snapshot) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
"""A step's journal rows (with the inbox row of each event: a waiting sender's find), the
last with the snapshot after the step (the run lifecycle's fork and reset)."""

_SEEN = "SELECT inbox_id FROM workflow_deliveries WHERE run_id = ? AND delivery_id = ?"
_RECORD_DELIVERY = (
    "INSERT INTO workflow_deliveries (run_id, delivery_id, inbox_id, created_at) "
    "VALUES (?, ?, ?, ?) ON CONFLICT (run_id, delivery_id) DO NOTHING "
    "RETURNING inbox_id"
)
"""A delivery's record (`send_delivery`): looked up, then written with its queued event."""

PICKED_NAMES = "id, lease_owner, wake_at"
"""What a claim reads of a run before leasing it: the owner it takes over, when it was due."""
_DEAD = "id, run_id{t}, event, created_at, dead_at, dead_reason"
_REASON_BEFORE, _REASON_AFTER = ended_reason("\x00").split("\x00")
ACTIVE_KEY_CONFLICT = (
    "ON CONFLICT (workflow_name, key) WHERE status = 'active' AND key IS NOT "
    "NULL AND parent_run_id IS NULL"
)
"""The conflict target of an idempotent start: the unique index of active top-level keys
(child runs are named under their parent and started once by the step that starts them)."""
_RUN_TREE = (
    "WITH RECURSIVE up (id, parent) AS (SELECT id, parent_run_id FROM workflow_runs WHERE id = ?"
    " UNION SELECT r.id, r.parent_run_id FROM workflow_runs r JOIN up ON r.id = {parent_id}), "
    "tree (id, key, parent, invoke, workflow) AS (SELECT id, key, parent_run_id, "
    "parent_invoke_id, workflow_name FROM workflow_runs WHERE id IN (SELECT id FROM up WHERE "
    "parent IS NULL) UNION SELECT r.id, r.key, r.parent_run_id, r.parent_invoke_id, "
    "r.workflow_name FROM workflow_runs r JOIN tree ON r.parent_run_id = tree.id{t} "
    "WHERE r.status = 'active') "
)
"""The run tree of the run `?`: its root (found up the parent links) and the root's active
descendants (down the child index), as `tree`. `UNION` ends the walk on a cycle a bad row might
make. A child run in it holds a systemId when it is still its parent's child (`invoke`) and its
key is that systemId (`SYSTEM_ID_HOLDER`)."""
SYSTEM_ID_HOLDER = "parent IS NOT NULL AND invoke IS NOT NULL AND key = ?"
log = logging.getLogger("statecharts.runs")


class _Sent(NamedTuple):
    """A sent event queued in an open transaction (`SQLRuns._send_in`), for `_sent`."""

    inbox_id: int
    rid: str
    written: Callable[[], int | None] | None  # the step's new version, once committed
    stepped: bool
    due: bool


class _Delivered(Exception):
    """Internal: the delivery was recorded by a concurrent transaction; roll this one back."""


class ScheduleMoved(Exception):
    """Internal: the schedule's version moved; roll the transaction back."""


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
    _KEY_SHARE = ""
    """A row lock kept to the commit that a hand-over's `_SKIP_LOCKED` skips (or a delete
    waits for) but plain updates of the row do not wait for (PostgreSQL `FOR KEY SHARE`)."""
    _JSON_VERSION = ""
    """SQL for the snapshot's `version` label, NULL when the snapshot does not parse."""
    _SEALED_KEY = ""
    """SQL for the key id of a sealed payload in `{column}`, NULL when it is in clear (or not
    JSON)."""
    _CLAIM_ORDER = f"wake_at - priority * {PRIORITY_AGING_MS}"
    """The claim order of due runs (`PRIORITY_AGING_MS`), as the claim index spells it."""
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

    _START_CONFLICT = f"{ACTIVE_KEY_CONFLICT} DO NOTHING"
    """The conflict clause of a start's insert (Citus: none, its keys are claimed first in a
    table of their own, `persistence.stores.citus`)."""

    _INTEGRITY_ERRORS: tuple[type[Exception], ...] = ()
    _CREATE_IS_ONE_STATEMENT = False
    """True where `_create_in` is one statement (PostgreSQL's CTE), so a lone create needs no
    transaction of its own."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.RUN_COLUMNS = RUN_NAMES.replace("id,", f"id{cls._TEXT_ID},", 1)
        cls.EFFECT_COLUMNS = EFFECT_NAMES.replace("run_id", f"run_id{cls._TEXT_ID}")

    def _run_tree(self) -> str:
        """`_RUN_TREE` in this dialect."""
        return _RUN_TREE.format(parent_id=self._AS_ID.format("up.parent"), t=self._TEXT_ID)

    def _tree_in(self, conn: Any, run_id: str) -> tuple[str, tuple[Any, ...]]:
        """The `WITH` clause that names run `run_id`'s run tree `tree` (`_RUN_TREE`), and its
        parameters."""
        return self._run_tree(), (run_id,)

    def _lock_tree_in(self, conn: Any, run_id: str) -> None:
        """Take `_LOCK_TREE` on run `run_id`'s tree, if the dialect has one."""
        if self._LOCK_TREE:
            self._exec(conn, self._run_tree() + self._LOCK_TREE, (run_id,))

    def new_child_id(self, parent_run_id: str) -> str:
        """A random run id (`RunStore.new_child_id`)."""
        return str(uuid.uuid4())

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

    def _create_in(
        self, conn: Any, run: NewRun, effects: Sequence[NewEffect], now: int
    ) -> tuple[RunRecord, bool]:
        """Create `run` in the open transaction (`SQLRuns`; PostgreSQL in one statement)."""
        raise NotImplementedError

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

    def _deliver_in(self, conn: Any, run_id: str, delivery: Delivery, now: int) -> None:
        """Queue `delivery` from run `run_id` (see `Delivery`) in the open transaction."""
        ts = self._t(now)
        if delivery.child is not None:
            target = delivery.child  # its own child's invoke id first, then a systemId
            # (found first: its event is sealed for the run it goes to)
            tree, tree_params = self._tree_in(conn, run_id)
            found = self._exec(
                conn,
                f"{tree}SELECT id{self._TEXT_ID} FROM tree WHERE (parent = ? AND "
                f"invoke = ?) OR ({SYSTEM_ID_HOLDER}) ORDER BY CASE WHEN parent = ? AND "
                "invoke = ? THEN 0 ELSE 1 END LIMIT 1",
                (*tree_params, run_id, target, target, run_id, target),
            ).fetchall()
            if not found:
                self._undeliverable_in(
                    conn,
                    run_id,
                    delivery,
                    f"no active child run {target!r}"
                    " (its own by invoke id, or by systemId in its run tree)",
                    now,
                )
                return
            child = str(found[0][0])
            self._exec(
                conn,
                "INSERT INTO workflow_inbox (run_id, event, created_at) VALUES (?, ?, ?)",
                (child, self._seal(delivery.event, child, Column.EVENT), ts),
            )
            return
        if delivery.parent is None:
            self._undeliverable_in(conn, run_id, delivery, "the run has no parent run", now)
            return
        parent_id = self._id(delivery.parent)
        event = self._seal(delivery.event, parent_id, Column.EVENT)
        sql = (
            "INSERT INTO workflow_inbox (run_id, event, created_at, dead_at, dead_reason) "
            "SELECT id, ?, ?, CASE WHEN status = 'active' THEN NULL ELSE ? END, "
            "CASE WHEN status = 'active' THEN NULL ELSE ? || status || ? END "
            "FROM workflow_runs WHERE id = ?"
        )
        params = [event, ts, ts, _REASON_BEFORE, _REASON_AFTER, parent_id]
        if delivery.completes:  # unless the parent stopped this child (it waits no more)
            sql += (
                " AND EXISTS (SELECT 1 FROM workflow_runs c WHERE c.id = ? AND "
                "c.parent_invoke_id IS NOT NULL)"
            )
            params.append(self._id(run_id))
        self._exec(conn, sql, params)

    def _undeliverable_in(
        self, conn: Any, run_id: str, delivery: Delivery, why: str, now: int
    ) -> None:
        """An event a run sent that has no one to go to: logged, and a dead letter of the
        sender (listed with its run's dead letters)."""
        reason = f"not delivered: {why}"
        log.warning(
            "run %s: event %r dead-lettered: %s", run_id, delivery.event.get("type"), reason
        )
        ts = self._t(now)
        self._exec(
            conn,
            "INSERT INTO workflow_inbox (run_id, event, created_at, dead_at, "
            "dead_reason) VALUES (?, ?, ?, ?, ?)",
            (
                self._id(run_id),
                self._seal(delivery.event, self._id(run_id), Column.EVENT),
                ts,
                ts,
                reason,
            ),
        )

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


class SQLRuns(SQLCalls, SQLDialect):
    """`RunStore` in SQL: runs and steps (with their calls: `SQLCalls`)."""

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
        due = (
            run.lease_owner is None and run.wake_at is not None and run.wake_at <= now
        ) or unowned_calls(effects, run.call_lease)
        if created and (due or children):
            self.wakeup().notify()
        return record, created

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

    def _dead_letter(self, conn: Any, run_id: str, status: str, ts: Any) -> None:
        """The run's still-queued events become dead letters: it ended in `status`."""
        self._exec(
            conn,
            "UPDATE workflow_inbox SET dead_at = ?, dead_reason = ? "
            "WHERE run_id = ? AND dead_at IS NULL",
            (ts, ended_reason(status), run_id),
        )

    @retried
    def send_event(
        self, run_id: str, event: Mapping[str, Any], now: int, *, traceparent: str | None = None
    ) -> int:
        """Queue an event for an active run, with the sender's `traceparent` (one statement;
        the status is read only to say why nothing was queued)."""
        rid = self._id(run_id)
        inserted = self._write_one(
            _QUEUE_EVENT + self._NOTIFY, self._queued(rid, event, now, traceparent)
        )
        if inserted:
            self.wakeup().notify(rid)
            return int(inserted[0][0])
        rows = self._read("SELECT status FROM workflow_runs WHERE id = ?", (rid,))
        if not rows:
            raise RunNotFoundError(f"no run with id {run_id!r}")
        raise RunFinishedError(f"run {run_id} has ended ({rows[0][0]})")

    @retried
    def send_delivery(
        self,
        run_id: str,
        event: Mapping[str, Any],
        now: int,
        delivery_id: str,
        *,
        traceparent: str | None = None,
    ) -> tuple[int, bool]:
        """`send_event` at most once per (run, `delivery_id`): the delivery is recorded in the
        transaction that queues the event (`workflow_deliveries`, schema 7). When it is already
        recorded, nothing is queued and the inbox id its event got is returned with False (also
        when the run has ended since)."""
        rid = self._id(run_id)
        try:
            inbox_id, queued = self._send_delivery_in(
                rid, run_id, event, now, delivery_id, traceparent
            )
        except _Delivered:  # a concurrent delivery of the same id committed first
            inbox_id, queued = int(self._read(_SEEN, (rid, delivery_id))[0][0]), False
        if queued:
            self.wakeup().notify(rid)
        return inbox_id, queued

    def _send_delivery_in(
        self,
        rid: str,
        run_id: str,
        event: Mapping[str, Any],
        now: int,
        delivery_id: str,
        traceparent: str | None,
    ) -> tuple[int, bool]:
        """`send_delivery`'s transaction."""
        with self._write() as conn:
            known = self._exec(conn, _SEEN, (rid, delivery_id)).fetchall()
            if known:
                return int(known[0][0]), False
            inserted = self._exec(
                conn, _QUEUE_EVENT + self._NOTIFY, self._queued(rid, event, now, traceparent)
            ).fetchall()
            if not inserted:
                status = self._exec(
                    conn, "SELECT status FROM workflow_runs WHERE id = ?", (rid,)
                ).fetchall()
                if not status:
                    raise RunNotFoundError(f"no run with id {run_id!r}")
                raise RunFinishedError(f"run {run_id} has ended ({status[0][0]})")
            inbox_id = int(inserted[0][0])
            # A concurrent delivery of the same id (PostgreSQL) waits here for the first to
            # commit and inserts nothing: it rolls back its queued event, answers the first's.
            recorded = self._exec(
                conn, _RECORD_DELIVERY, (rid, delivery_id, inbox_id, self._t(now))
            ).fetchall()
            if not recorded:
                raise _Delivered
            return inbox_id, True

    def _queued(
        self,
        rid: str,
        event: Mapping[str, Any],
        now: int,
        traceparent: str | None,
        call_key: str | None = None,
    ) -> tuple[Any, ...]:
        """`_QUEUE_EVENT`'s parameters (`call_key`: the call whose result it is)."""
        return (
            self._seal(dict(event), rid, Column.EVENT),
            self._t(now),
            traceparent,
            call_key,
            rid,
        )

    def pending_events(self, run_id: str) -> list[InboxEvent]:
        """Queued events, oldest first."""
        rows = self._read(
            f"SELECT {_INBOX.format(t=self._TEXT_ID)} FROM workflow_inbox WHERE run_id = ? "
            "AND dead_at IS NULL ORDER BY id",
            (self._id(run_id),),
        )
        return [self._inbox(r) for r in rows]

    @retried
    def claim_runs(
        self,
        owner: str,
        now: int,
        lease_ms: int,
        limit: int,
        versions: Collection[tuple[str, str]] | None = None,
    ) -> list[RunRecord]:
        """Lease runs that are due or have queued events (`CLAIMABLE`, `CLAIMABLE_BY_EVENT`);
        a claimed row that does not parse is failed at once, never stepped or claimed again."""
        return self._claim(
            owner, now, lease_ms, limit, versions, with_work=False, fail_broken=True
        )[0]

    @retried
    def claim_work(
        self,
        owner: str,
        now: int,
        lease_ms: int,
        limit: int,
        versions: Collection[tuple[str, str]] | None = None,
    ) -> list[tuple[RunRecord, PendingWork]]:
        """`claim_runs` and the claimed runs' `pending_work` (PostgreSQL: one round trip); a
        claimed row that does not parse is returned leased, with its `problem`, for the worker
        to fail with its telemetry."""
        claimed, work = self._claim(
            owner, now, lease_ms, limit, versions, with_work=True, fail_broken=False
        )
        missing = [run.id for run in claimed if run.id not in work]
        if missing:
            work.update(self.pending_work(missing))
        return [(run, work[run.id]) for run in claimed]

    def _claim(
        self,
        owner: str,
        now: int,
        lease_ms: int,
        limit: int,
        versions: Collection[tuple[str, str]] | None,
        with_work: bool,
        fail_broken: bool,
    ) -> tuple[list[RunRecord], dict[str, PendingWork]]:
        """The claim shared by `claim_runs` and `claim_work`: rows that do not parse are, if
        `fail_broken`, failed at once and left out."""
        if versions is not None and not versions:
            return [], {}
        pairs = None if versions is None else sorted(set(versions))
        claimed, work = self._lease(owner, now, now + lease_ms, limit, pairs, with_work)
        if not fail_broken:
            return claimed, work
        for run in claimed:
            if run.problem is not None:
                self.fail_run(run.id, owner, run.problem, now)
        return [run for run in claimed if run.problem is None], work

    def _lease(
        self,
        owner: str,
        now: int,
        expires: int,
        limit: int,
        pairs: list[tuple[str, str]] | None,
        with_work: bool,
    ) -> tuple[list[RunRecord], dict[str, PendingWork]]:
        """Find and lease the claimable runs (each record knows its previous owner and when it
        was due): found, then leased, in one write transaction, whose lock keeps two claimers
        from one run. A dialect that reads the runs' pending work in the same round trip
        returns it when asked (`with_work`); here it is read after the claim."""
        version_sql, version_params = _version_filter(pairs)
        free = "(lease_owner IS NULL OR lease_expires_at <= ?)"
        due = CLAIMABLE.format(now="?", free=free)
        asked = CLAIMABLE_BY_EVENT.format(free=free)
        ts = self._t(now)
        with self._write() as conn:
            found = self._exec(
                conn,
                f"SELECT {PICKED_NAMES} FROM (SELECT {PICKED_NAMES} FROM workflow_runs WHERE "
                # priorities (issue 30): never negative, so a due run's order is at most now
                f"{due} AND {self._CLAIM_ORDER} <= ? {version_sql} "
                f"ORDER BY {self._CLAIM_ORDER} LIMIT ?) AS due UNION "
                f"SELECT {PICKED_NAMES} FROM (SELECT {PICKED_NAMES} FROM workflow_runs WHERE id "
                f"IN (SELECT run_id FROM workflow_inbox WHERE dead_at IS NULL) AND {asked} "
                f"{version_sql} LIMIT ?) AS asked LIMIT ?",
                (ts, ts, ts, *version_params, limit, ts, *version_params, limit, limit),
            ).fetchall()
            if not found:
                return [], {}
            previous = {run_id: (owner, due_at) for run_id, owner, due_at in found}
            marks = ",".join("?" * len(found))
            rows = self._exec(
                conn,
                "UPDATE workflow_runs SET lease_owner = ?, lease_expires_at = ?, wake_at = ?, "
                f"claim_count = claim_count + 1 WHERE id IN ({marks}) RETURNING {self.RUN_COLUMNS}",
                (owner, self._t(expires), self._t(expires), *previous),
            ).fetchall()
        return [self._run(r, *previous[r[0]]) for r in rows], {}

    @retried
    def heartbeat(self, owner: str, run_ids: Collection[str], now: int, lease_ms: int) -> set[str]:
        """Extend the caller's leases."""
        if not run_ids:
            return set()
        ids = [self._id(i) for i in run_ids]
        expires = self._t(now + lease_ms)
        rows = self._write_one(
            "UPDATE workflow_runs SET lease_expires_at = ?, wake_at = ? "
            f"WHERE lease_owner = ? AND id IN ({','.join('?' * len(ids))}) "
            f"RETURNING id{self._TEXT_ID}",
            (expires, expires, owner, *ids),
        )
        return {r[0] for r in rows}

    @retried
    def release(
        self,
        run_id: str,
        owner: str,
        wake_at: int | None,
        *,
        attempt_count: int | None = None,
        last_error: str | None = None,
    ) -> bool:
        """Give up a lease without stepping."""
        # no next wake: plain NULL (PostgreSQL types a CASE of NULLs as text, not timestamptz)
        wake, wake_params = (
            (
                "CASE WHEN status = 'active' OR EXISTS (SELECT 1 FROM "
                "workflow_effects e WHERE e.run_id = workflow_runs.id AND "
                "e.status = 'pending') THEN ? END",
                (self._t(wake_at),),
            )
            if wake_at is not None
            else ("NULL", ())
        )
        return bool(
            self._write_one(
                "UPDATE workflow_runs SET lease_owner = NULL, lease_expires_at = NULL, "
                f"wake_at = {wake}, attempt_count = coalesce(?, attempt_count), "
                "last_error = coalesce(?, last_error)"
                " WHERE id = ? AND lease_owner = ? RETURNING 1",
                (*wake_params, attempt_count, last_error, self._id(run_id), owner),
            )
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

    @retried
    def sweep_dead_letters(self, now: int) -> list[DeadLetter]:
        """Live events of ended runs become dead letters."""
        rows = self._write_one(
            "UPDATE workflow_inbox SET dead_at = ?, dead_reason = ? || "
            "(SELECT status FROM workflow_runs r WHERE r.id = workflow_inbox.run_id) || ? "
            "WHERE dead_at IS NULL AND run_id IN "
            "(SELECT id FROM workflow_runs WHERE status <> 'active') "
            f"RETURNING {_DEAD.format(t=self._TEXT_ID)}",
            (self._t(now), _REASON_BEFORE, _REASON_AFTER),
        )
        return [self._dead(r) for r in rows]

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
        holder_params: tuple[Any, ...] = ()
        if commit.unleased:  # nobody may hold it (nor may it have ended meanwhile)
            holder = "lease_owner IS NULL AND status = 'active'"
        else:
            holder, holder_params = "lease_owner = ?", (commit.owner,)
        cursor = self._exec(
            conn,
            "UPDATE workflow_runs SET state = ?, snapshot = ?, status = ?, "
            "attempt_count = coalesce(?, attempt_count), last_error = coalesce(?, last_error),"
            f"{traceback_sql} workflow_version = coalesce(?, workflow_version),"
            " updated_at = ?, completed_at = coalesce(completed_at, ?), "
            f"failed_at = coalesce(failed_at, ?), version = ?{lease_sql} "
            f"WHERE id = ? AND version = ? AND {holder}",
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
                commit.expected_version,
                *holder_params,
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
                f"SELECT {_INBOX.format(t=self._TEXT_ID)} FROM workflow_inbox "
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
        step: Callable[[RunRecord, PendingWork], StepCommit | None],
        *,
        traceparent: str | None = None,
        cancelled: list[str] | None = None,
        rest: RunRecord | None = None,
        finish: CallFinish | None = None,
    ) -> tuple[int, int | None]:
        """`send_event`, and the step that applies the event in the same transaction when
        `step` (handed the run, locked, with its pending work, the event last in its inbox)
        returns one: written as `commit_steps` writes it, so the event is queued and consumed
        in one commit; else it stays queued and a worker is woken for it. Returns the inbox
        id and the run's new version (None: queued). `cancelled` as in `commit_steps`. `rest`
        is not used here (SQLite's reads are in-process; PostgreSQL's dialect steps from it).
        With `finish`, the event is that call's result: the call's end is recorded first, and
        only if its holder still holds it is the event queued (else (0, None): dropped)."""
        del rest
        ended = list[str]()
        with self._pipelined_write() as conn:
            sent = self._send_in(conn, run_id, event, now, step, traceparent, finish, ended)
        if cancelled is not None:
            cancelled.extend(ended)
        return self._sent(sent)

    @retried
    def finish_calls(
        self,
        ends: Sequence[tuple[CallFinish, str, Mapping[str, Any]]],
        now: int,
        step: Callable[[RunRecord, PendingWork], StepCommit | None],
        cancelled: list[str] | None = None,
        rests: Mapping[str, RunRecord] | None = None,
    ) -> list[tuple[int, int | None]]:
        """`send_and_step` with its `finish` for each (call end, run id, result event), all in
        one transaction (`Calls.finish_calls`); `rests` as `send_and_step`'s `rest`."""
        del rests
        ended, sent = list[str](), []
        with self._pipelined_write() as conn:
            for finish, run_id, event in ends:
                sent.append(self._send_in(conn, run_id, event, now, step, None, finish, ended))
        if cancelled is not None:
            cancelled.extend(ended)
        return [self._sent(one) for one in sent]

    def _send_in(
        self,
        conn: Any,
        run_id: str,
        event: Mapping[str, Any],
        now: int,
        step: Callable[[RunRecord, PendingWork], StepCommit | None],
        traceparent: str | None,
        finish: CallFinish | None,
        ended: list[str],
    ) -> _Sent | None:
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
        commit = step(run, work)
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
        return _Sent(int(inserted[0][0]), rid, written, commit is not None, due)

    def _sent(self, sent: _Sent | None) -> tuple[int, int | None]:
        """After `_send_in`'s transaction: the inbox id and new version, workers woken."""
        if sent is None:
            return 0, None
        version = None if sent.written is None else sent.written()
        if sent.stepped and version is None:  # (under the row lock it is always written)
            with self._statement_write() as conn:
                self._notify_in(conn, sent.rid)
        if version is None:
            self.wakeup().notify(sent.rid)
        elif sent.due:
            self.wakeup().notify()
        return sent.inbox_id, version


class SQLQueries(SQLDialect):
    """`RunQueries` in SQL: the operator's listings, counts and reports."""

    def list_runs(
        self,
        status: str | None = None,
        workflow_name: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[RunRecord]:
        """Runs newest first, filtered."""
        where, params = self._where(RunQuery(status=status, workflow_name=workflow_name))
        rows = self._read(
            f"SELECT {self.RUN_COLUMNS} FROM workflow_runs {where} "
            "ORDER BY created_at DESC, id LIMIT ? OFFSET ?",
            (*params, limit, offset),
        )
        return [self._run(r) for r in rows]

    def _where(self, query: RunQuery) -> tuple[str, list[Any]]:
        return run_query_sql(query, "?", self._t)

    def search_runs(self, query: RunQuery, limit: int = 50, offset: int = 0) -> list[RunRecord]:
        """Runs matching `query`, newest first."""
        where, params = self._where(query)
        rows = self._read(self._page_sql(where), (*params, limit, offset))
        return [self._run(r) for r in rows]

    def _page_sql(self, where: str) -> str:
        """One page of the runs matching `where`, newest first (LIMIT and OFFSET last)."""
        return (
            f"SELECT {self.RUN_COLUMNS} FROM workflow_runs {where} "
            "ORDER BY created_at DESC, id LIMIT ? OFFSET ?"
        )

    def count_runs(self) -> dict[str, int]:
        """Runs per status."""
        rows = self._read("SELECT status, count(*) FROM workflow_runs GROUP BY status")
        return {status: int(n) for status, n in rows}

    def count_matching(self, query: RunQuery) -> dict[str, int]:
        """Runs matching `query`, per status."""
        where, params = self._where(query)
        status = known_status(query)
        if status is not None:
            n = int(self._read(f"SELECT count(*) FROM workflow_runs {where}", params)[0][0])
            return {status: n} if n else {}
        group = self._STATUS_GROUP if query.state is not None else "status"
        rows = self._read(
            f"SELECT status, count(*) FROM workflow_runs {where} GROUP BY {group}", params
        )
        return {status: int(n) for status, n in rows}

    def run_groups(
        self, column: str, workflow_name: str | None = None
    ) -> list[tuple[str, str, int]]:
        """(value, status, runs) per group of runs."""
        check_group_column(column)
        where, params = self._where(RunQuery(workflow_name=workflow_name))
        rows = self._read(
            f"SELECT {column}, status, count(*) FROM workflow_runs {where} "
            f"GROUP BY {column}, status ORDER BY {column}, status",
            params,
        )
        return [(value, status, int(n)) for value, status, n in rows]

    def list_effects(
        self, run_id: str, status: str | None = None, *, last: int | None = None
    ) -> list[EffectRecord]:
        """Outbox rows of a run in (step, index) order (the newest `last` of them)."""
        check_last(last)
        sql = f"SELECT {self.EFFECT_COLUMNS} FROM workflow_effects WHERE run_id = ?"
        params: tuple[Any, ...] = (self._id(run_id),)
        if status is not None:
            sql += " AND status = ?"
            params += (status,)
        sql += " ORDER BY step DESC, effect_index DESC"
        if last is not None:
            sql += " LIMIT ?"
            params += (last,)
        return [self._effect(r) for r in reversed(self._read(sql, params))]

    def error_traceback(self, run_id: str) -> str | None:
        """The traceback recorded with the run's failure, if any."""
        rows = self._read(
            "SELECT error_traceback FROM workflow_runs WHERE id = ?", (self._id(run_id),)
        )
        return str(rows[0][0]) if rows and rows[0][0] is not None else None

    def list_events(self, run_id: str, *, last: int | None = None) -> list[EventRecord]:
        """Journal rows of a run, oldest first (the newest `last` of them)."""
        check_last(last)
        sql = (
            f"SELECT id, run_id{self._TEXT_ID}, step, event, state_before, state_after, "
            "created_at FROM workflow_events WHERE run_id = ? ORDER BY id DESC"
        )
        params: tuple[Any, ...] = (self._id(run_id),)
        if last is not None:
            sql += " LIMIT ?"
            params += (last,)
        return [
            EventRecord(i, r, s, self._open(e, r, Column.JOURNAL), b, a, self._ms(c))
            for i, r, s, e, b, a, c in reversed(self._read(sql, params))
        ]

    def count_events(self, run_id: str) -> int:
        """Journal rows of a run."""
        return int(
            self._read(
                "SELECT count(*) FROM workflow_events WHERE run_id = ?", (self._id(run_id),)
            )[0][0]
        )

    def event_progress(self, run_id: str, inbox_id: int) -> EventProgress:
        """Where the event of inbox row `inbox_id` stands: its inbox row read first, then its
        journal entry (which a step writes as it deletes the row), so that a step committing
        between the two reads is seen by the second."""
        rid = self._id(run_id)
        queued, journaled = self._read_all(
            [
                (
                    "SELECT dead_reason FROM workflow_inbox WHERE run_id = ? AND id = ?",
                    (rid, inbox_id),
                ),
                (
                    "SELECT step, state_after FROM workflow_events "
                    "WHERE run_id = ? AND inbox_id = ? "
                    "ORDER BY id DESC LIMIT 1",
                    (rid, inbox_id),
                ),
            ]
        )
        if journaled:
            return EventProgress("applied", int(journaled[0][0]), str(journaled[0][1]))
        if not queued:  # applied by a step that journaled nothing
            return EventProgress("applied")
        reason = queued[0][0]
        return EventProgress("queued") if reason is None else EventProgress("dead", reason=reason)

    def match_ids(self, query: RunQuery, after: str | None = None, limit: int = 500) -> list[str]:
        """Ids of runs matching `query` after `after`, in id order (a bulk action's page)."""
        where, params = self._where(query)
        if after is not None:
            where = f"{where} AND id > ?" if where else "WHERE id > ?"
            params.append(self._id(after))
        rows = self._read(
            f"SELECT id{self._TEXT_ID} FROM workflow_runs {where} ORDER BY id LIMIT ?",
            (*params, limit),
        )
        return [str(r[0]) for r in rows]

    def search_attributes(self, run_id: str) -> dict[str, str]:
        """The run's search attributes."""
        rows = self._read(
            "SELECT name, value FROM workflow_search WHERE run_id = ? ORDER BY name",
            (self._id(run_id),),
        )
        return {str(n): str(v) for n, v in rows}

    def dead_letters(self, run_id: str) -> list[DeadLetter]:
        """Events of the run that can no longer be applied, oldest first."""
        rows = self._read(
            f"SELECT {_DEAD.format(t=self._TEXT_ID)} FROM workflow_inbox "
            "WHERE run_id = ? AND dead_at IS NOT NULL ORDER BY id",
            (self._id(run_id),),
        )
        return [self._dead(r) for r in rows]

    def stuck_runs(self, now: int, older_than_ms: int, limit: int = 100) -> list[RunRecord]:
        """Active runs untouched for `older_than_ms`, not waiting for a later timer."""
        where, params = self._where(RunQuery(stuck_before=now - older_than_ms))
        rows = self._read(
            f"SELECT {self.RUN_COLUMNS} FROM workflow_runs {where} "
            "ORDER BY updated_minute, updated_at LIMIT ?",  # (the same order as updated_at's)
            (*params, limit),
        )
        return [self._run(r) for r in rows]

    def unknown_versions(self, known: Collection[tuple[str, str]]) -> list[VersionCount]:
        """Active runs grouped by versions not in `known`."""
        rows = self._read(
            f"SELECT workflow_name, workflow_version, count(*), {self._JSON_VERSION}"
            " FROM workflow_runs WHERE status = 'active' GROUP BY 1, 2, 4 ORDER BY 1, 2, 4"
        )
        wanted = set(known)
        return [VersionCount(n, v, int(c), lb) for n, v, c, lb in rows if (n, v) not in wanted]


class SQLCoordination(SQLDialect):
    """`Coordination` in SQL: claims, breakers, schedules."""

    @retried
    def try_claim(
        self, name: str, owner: str, now: int, stale_after_ms: int, run_id: str | None = None
    ) -> bool:
        """Take or refresh the claim `name`."""
        return bool(
            self._write_one(
                "INSERT INTO workflow_claims (name, owner, run_id, claimed_at, expires_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, "
                "run_id = excluded.run_id, claimed_at = excluded.claimed_at, "
                "expires_at = excluded.expires_at "
                "WHERE workflow_claims.owner = excluded.owner OR workflow_claims.expires_at <= ? "
                "RETURNING name",
                (
                    name,
                    owner,
                    None if run_id is None else self._id(run_id),
                    self._t(now),
                    self._t(now + stale_after_ms),
                    self._t(now),
                ),
            )
        )

    @retried
    def release_claim(self, name: str, owner: str) -> bool:
        """Drop our claim."""
        return bool(
            self._write_one(
                "DELETE FROM workflow_claims WHERE name = ? AND owner = ? RETURNING 1",
                (name, owner),
            )
        )

    def get_claim(self, name: str) -> ClaimRecord | None:
        """The current claim record."""
        rows = self._read(
            f"SELECT name, owner, run_id{self._TEXT_ID}, claimed_at, expires_at "
            "FROM workflow_claims WHERE name = ?",
            (name,),
        )
        if not rows:
            return None
        n, o, r, c, e = rows[0]
        return ClaimRecord(n, o, r, self._ms(c), self._ms(e))

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
        return BreakerRecord(n, s, f, self._ms(o), self._load(d), self._ms(u), v)

    @retried
    def put_breaker(self, record: BreakerRecord, expected_version: int, now: int) -> bool:
        """Compare-and-set breaker state."""
        values = (
            record.state,
            record.failure_count,
            self._t(record.opened_at),
            self._j(record.data),
            self._t(now),
            record.name,
        )
        if expected_version == 0:
            return bool(
                self._write_one(
                    "INSERT INTO workflow_breakers (state, failure_count, opened_at, data, "
                    "updated_at, name, version) VALUES (?, ?, ?, ?, ?, ?, 1) "
                    "ON CONFLICT (name) DO NOTHING RETURNING 1",
                    values,
                )
            )
        return bool(
            self._write_one(
                "UPDATE workflow_breakers SET state = ?, failure_count = ?, opened_at = ?, "
                "data = ?, updated_at = ?, version = version + 1 "
                "WHERE name = ? AND version = ? RETURNING 1",
                (*values, expected_version),
            )
        )

    def get_schedule(self, name: str) -> ScheduleRecord | None:
        """Stored schedule state."""
        rows = self._read(
            f"SELECT {_SCHEDULE_COLUMNS} FROM workflow_schedules WHERE name = ?", (name,)
        )
        return self._schedule(rows[0]) if rows else None

    def list_schedules(self, limit: int = 100) -> list[ScheduleRecord]:
        """Stored schedules, by name."""
        return [
            self._schedule(row)
            for row in self._read(
                f"SELECT {_SCHEDULE_COLUMNS} FROM workflow_schedules ORDER BY name LIMIT ?",
                (limit,),
            )
        ]

    def _schedule(self, row: Sequence[Any]) -> ScheduleRecord:
        n, last, v, run_id, buffered, count, skipped = row
        records = self._load(skipped)
        return ScheduleRecord(
            n,
            self._ms(last),
            v,
            run_id,
            self._ms(buffered),
            int(count),
            tuple(records) if isinstance(records, list) else (),
        )

    @retried
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
        """Advance the schedule and create its run (with its child runs) together."""
        try:
            with self._write() as conn:
                record, created = self._create_run_in(conn, run, effects, now)
                self._advance_schedule(
                    conn, name, expected_version, fire_at, record.id, buffered_at, skipped
                )
                if created:
                    self._create_all_in(conn, [(run, ())], children, now)
                return record
        except ScheduleMoved:
            return None

    @retried
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
        """Advance the schedule past skipped or buffered slots, starting no run."""
        try:
            with self._write() as conn:
                self._advance_schedule(
                    conn, name, expected_version, decided_to, None, buffered_at, skipped
                )
                return True
        except ScheduleMoved:
            return False

    def _advance_schedule(
        self,
        conn: Any,
        name: str,
        expected_version: int,
        decided_to: int,
        run_id: str | None,
        buffered_at: int | None,
        skipped: Sequence[Mapping[str, Any]],
    ) -> None:
        """Move the schedule to its next version (`ScheduleMoved` if it is not at
        `expected_version`): decided up to `decided_to`, its last run `run_id` (kept if None),
        its buffered slot, its skip records (the latest `MAX_SKIP_RECORDS`) and count."""
        previous = self._exec(
            conn,
            "SELECT skipped, skipped_count, last_run_id, version FROM workflow_schedules "
            "WHERE name = ?",
            (name,),
        ).fetchone()
        if (previous[3] if previous else 0) != expected_version:
            raise ScheduleMoved
        kept = self._load(previous[0]) if previous else []
        records = [*(kept if isinstance(kept, list) else []), *skipped][-MAX_SKIP_RECORDS:]
        count = (int(previous[1]) if previous else 0) + sum(int(r["count"]) for r in skipped)
        values = (
            self._t(decided_to),
            run_id if run_id is not None else (previous[2] if previous else None),
            self._t(buffered_at),
            count,
            self._j(records),
        )
        if previous is None:
            moved = self._exec(
                conn,
                "INSERT INTO workflow_schedules (last_fire_at, last_run_id, buffered_at, "
                "skipped_count, skipped, name, version) VALUES (?, ?, ?, ?, ?, ?, 1) "
                "ON CONFLICT (name) DO NOTHING RETURNING 1",
                (*values, name),
            ).fetchall()
        else:
            moved = self._exec(
                conn,
                "UPDATE workflow_schedules SET last_fire_at = ?, last_run_id = ?, "
                "buffered_at = ?, skipped_count = ?, skipped = ?, version = version + 1 "
                "WHERE name = ? AND version = ? RETURNING 1",
                (*values, name, expected_version),
            ).fetchall()
        if not moved:
            raise ScheduleMoved


class SQLStore(SQLLifecycle, SQLRuns, SQLQueries, SQLCoordination, SQLCapacity, SQLReencrypt):
    """The whole `Store` in SQL; subclasses are the dialects."""

    def schema_version(self) -> int:
        """The applied schema version (0 if the database is empty)."""
        raise NotImplementedError

    def check_schema(self) -> None:
        """Raise `SchemaVersionError` unless the schema is current."""
        schema.check_current(self.dialect, self.schema_version(), self.url)


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


def _version_filter(pairs: list[tuple[str, str]] | None) -> tuple[str, tuple[str, ...]]:
    if pairs is None:
        return "", ()
    marks = ",".join("(?, ?)" for _ in pairs)
    return (
        f"AND (workflow_name, workflow_version) IN (VALUES {marks})",
        tuple(x for pair in pairs for x in pair),
    )
