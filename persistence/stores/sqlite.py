"""SQLite dialect: the embedded default (stdlib `sqlite3`, WAL journal, no server).

Every write is one `BEGIN IMMEDIATE` transaction, so writers from many threads and processes are
serialized by SQLite's file lock; readers never block thanks to WAL. One connection per store
object, guarded by a lock (sqlite3 connections are not safe to share without one). The SQL
itself is `persistence.stores.sql`'s, shared with PostgreSQL.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from persistence import schema
from persistence.stores.clocks import StoreClock, machine_clock
from persistence.stores.conflicts import count_ended
from persistence.stores.errors import StoreEncodingError, StoreError, StoreUnavailableError
from persistence.stores.sql import SQLStore

log = logging.getLogger("statecharts.store")

_TRANSIENT = ("locked", "busy", "unable to open", "disk i/o", "readonly database")
_SYNCHRONOUS = ("off", "normal", "full", "extra")


def _dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError as exc:  # orjson.JSONEncodeError: a value no store holds exactly
        raise StoreEncodingError(f"cannot store value: {exc}") from exc


def _translate(exc: sqlite3.Error) -> StoreError:
    message = str(exc).lower()
    if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        # (like PostgreSQL's disk_full: workers back off and retry until there is room)
        return StoreUnavailableError(
            "SQLite database or disk is full (SQLITE_FULL): nothing of this write was stored; "
            "free disk space (or raise max_page_count)"
        )
    if isinstance(exc, sqlite3.OperationalError) and any(t in message for t in _TRANSIENT):
        return StoreUnavailableError(f"SQLite database unavailable: {exc}")
    return StoreError(f"SQLite error: {exc}")


class SQLiteStore(SQLStore):
    """Durable-run store in one SQLite file (`path`), WAL mode.

    `synchronous` is SQLite's durability setting: "full" (default) survives power loss, "normal"
    survives process crashes only and is faster.
    """

    dialect = "sqlite"
    _JSON_VERSION = "CASE WHEN json_valid(snapshot) THEN json_extract(snapshot, '$.version') END"
    _SEALED_KEY = "CASE WHEN json_valid({column}) THEN json_extract({column}, '$.\"$enc\"') END"
    # With a state filter, `+status` keeps SQLite on the state index (group after filtering)
    # instead of walking the listing index in status order and reading every row.
    _STATUS_GROUP = "+status"
    _INTEGRITY_ERRORS = (sqlite3.IntegrityError,)

    def __init__(
        self, path: str | Path, synchronous: str = "full", busy_timeout_ms: int = 30_000
    ) -> None:
        if synchronous.lower() not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {_SYNCHRONOUS}, got {synchronous!r}")
        self.path = str(path)
        self.url = f"sqlite:///{self.path}"
        self._lock = threading.RLock()
        self._clock: StoreClock | None = None
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
                count_ended()
            except BaseException as exc:
                self._roll_back()
                if isinstance(exc, sqlite3.Error):
                    raise _translate(exc) from exc
                if isinstance(exc, UnicodeEncodeError | OverflowError):
                    raise StoreEncodingError(f"cannot store value: {exc}") from exc
                raise

    def _roll_back(self) -> None:
        """End the failed transaction, unless SQLite has already rolled it back itself (it
        does on SQLITE_FULL, SQLITE_IOERR, SQLITE_NOMEM): the error that ended it is the one
        to raise, never "cannot rollback - no transaction is active"."""
        if not self._conn.in_transaction:
            return
        try:
            self._conn.execute("ROLLBACK")
        except sqlite3.Error as other:
            log.warning("SQLite rollback after a failed write failed too: %s", other)

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._conn
            except sqlite3.Error as exc:
                raise _translate(exc) from exc

    def _many(self, conn: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        conn.executemany(sql, rows)

    def _j(self, value: Any) -> str:
        return _dumps(value)

    def _load(self, value: Any) -> Any:
        return orjson.loads(value)

    def _page_sql(self, where: str) -> str:
        # Page through rowids first (from an index alone), then read only the page's rows.
        order = "ORDER BY created_at DESC, rowid DESC"
        return (
            f"SELECT {self.RUN_COLUMNS} FROM workflow_runs WHERE rowid IN (SELECT rowid "
            f"FROM workflow_runs {where} {order} LIMIT ? OFFSET ?) {order}"
        )

    def clock(self) -> StoreClock:
        """This machine's clock, its anchor kept in `workflow_clock` (`clocks.machine_clock`)."""
        with self._lock:
            if self._clock is None:
                self._clock = machine_clock(self._clock_offset, self._keep_clock_offset)
            return self._clock

    def _clock_offset(self, boot: str, offset: int) -> int:
        """The offset kept for `boot`; `offset` kept and returned if there is none (a new boot
        replaces the row of the one before). `offset` alone (this process's anchor) where the
        schema has no `workflow_clock` yet or the row cannot be written (a read-only file)."""
        if not self._read(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", ("workflow_clock",)
        ):
            return offset
        kept = self._read("SELECT offset_ms FROM workflow_clock WHERE boot_id = ?", (boot,))
        if kept:
            return int(kept[0][0])
        try:
            with self._write() as conn:
                rows = conn.execute(
                    "SELECT offset_ms FROM workflow_clock WHERE boot_id = ?", (boot,)
                ).fetchall()
                if rows:  # (another process kept one meanwhile)
                    return int(rows[0][0])
                conn.execute("DELETE FROM workflow_clock")
                conn.execute(
                    "INSERT INTO workflow_clock (boot_id, offset_ms) VALUES (?, ?)", (boot, offset)
                )
                return offset
        except StoreError as exc:
            log.warning(
                "the store clock's anchor was not kept (this process keeps its own): %s", exc
            )
            return offset

    def _keep_clock_offset(self, boot: str, offset: int) -> None:
        """Move the kept offset of `boot` forward to `offset` (never back)."""
        try:
            with self._write() as conn:
                conn.execute(
                    "UPDATE workflow_clock SET offset_ms = max(offset_ms, ?) WHERE boot_id = ?",
                    (offset, boot),
                )
        except StoreError as exc:  # this process follows anyway; others follow the wall too
            log.warning("the store clock's new offset was not kept: %s", exc)

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


def _statements(sql: str) -> list[str]:
    """Split a migration file into statements (our files have no `;` inside literals)."""
    lines = [line.split("--", 1)[0] for line in sql.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
