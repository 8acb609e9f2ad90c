"""PostgreSQL's connections: a pool that hands out the connection given back last
(`RecentFirstPool`), a pooled connection checked out for one use (`Checkout`), statements
run on kept cursors (`execute`, `execute_hot`), psycopg's errors as the store's, a schema made on
first use, and the connection that LISTENs for wake-ups (`Listener`).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import psycopg
import psycopg_pool
from psycopg import sql
from psycopg.types.json import set_json_dumps, set_json_loads

from persistence.stores.conflicts import count_ended
from persistence.stores.errors import (
    ConflictError,
    StoreEncodingError,
    StoreError,
    StoreUnavailableError,
)
from persistence.stores.poolers import behind_pooler, refused_options
from persistence.stores.postgres_statements import CHANNEL, PROCESS, PROGRESS
from persistence.stores.postgres_values import dumps, loads
from persistence.wakeup import Wakeup

log = logging.getLogger("statecharts.store")


SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
LISTENER_THREAD = "statecharts-listen"
"""The name of a store's wake-up listener thread (`Listener`), as stack dumps show it."""


def configure_json(conn: psycopg.Connection[Any]) -> None:
    set_json_dumps(dumps, conn)
    set_json_loads(loads, conn)


class RecentFirstPool(psycopg_pool.ConnectionPool[Any]):
    """psycopg's pool handing out the connection given back last (last in, first out), where
    psycopg's hands out the one given back first: once the pool has grown (a burst, a worker's
    threads), one caller at a time used every connection in turn, each statement on a backend
    gone cold since its last, and none of them ever idle long enough to be closed (`max_idle`).
    Measured, 2,000-3,000 workflows one at a time (`Inline.run`, the pool grown to two), this
    order against psycopg's in twelve alternating pairs: medians 3.99 against 4.77 ms a
    workflow (faster in 9 pairs), the server's CPU 1.98 against 2.56 ms (less in 11). The
    connections left idle stay in the order they were given back, the least recently used
    first, which the pool closes first when it shrinks. SQLAlchemy's `pool_use_lifo`, Go's
    `database/sql` and node-postgres's pool choose the same."""

    def _get_ready_connection(self, timeout: float | None) -> psycopg.Connection[Any] | None:
        self._pool.rotate(1)  # (under the pool's lock) the last given back, taken from the left
        return super()._get_ready_connection(timeout)


class Checkout:
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
            elif conn.pgconn.transaction_status != IDLE:
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


IDLE = psycopg.pq.TransactionStatus.IDLE


def execute(
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
    return cursor.execute(encoded(query), params, binary=binary)


def execute_hot(
    conn: psycopg.Connection[Any], query: str, params: Any, binary: bool = False
) -> psycopg.Cursor[Any]:
    """`execute` for a hot statement with a small result (a start's insert, a step's commit)
    on a cursor kept for that statement: psycopg keeps a cursor's adapters (the parameters'
    dumpers, the columns' loaders) only while it runs the same query object again, and on the
    one shared cursor the start's and the steps' statements alternate, so every statement
    built them anew (about a tenth of a workflow's client instructions)."""
    cursors: dict[bytes, psycopg.Cursor[Any]] | None = getattr(conn, "_statecharts_hot", None)
    if cursors is None:
        cursors = {}
        setattr(conn, "_statecharts_hot", cursors)  # noqa: B010 (not a declared attribute)
    text = encoded(query)
    cursor = cursors.get(text)
    if cursor is None or cursor.closed:
        cursor = cursors[text] = conn.cursor()
    return cursor.execute(text, params, binary=binary)


@lru_cache(maxsize=256)
def encoded(query: str) -> bytes:
    """`query` as the bytes psycopg sends, the same object each time: psycopg encodes a text
    query anew for every statement and hashes the copy to find its parsed form (a hot
    statement is 2-3 kB: about a tenth of a small statement's client instructions). Its
    layout is squeezed out (`_compact`): psycopg keeps the parsed form only of statements up
    to 4 kB and parses a longer one again at every execution."""
    return _compact(query).encode()


_LAYOUT = re.compile(r"('(?:[^']|'')*'|--[^\n]*)")
"""What `_compact` leaves alone: string literals and comments."""


def _compact(sql: str) -> str:
    """`sql` with each run of blanks cut to one space and the indentation of its lines
    dropped, outside string literals and comments (newlines stay: they end comments)."""
    parts = _LAYOUT.split(sql)
    for i in range(0, len(parts), 2):
        parts[i] = re.sub(r"[ \t]*\n\s*", "\n", re.sub(r"[ \t]+", " ", parts[i]))
    return "".join(parts).strip()


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


class Listener:
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
        self._thread = threading.Thread(target=self._listen, name=LISTENER_THREAD, daemon=True)
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
                    (channel,) = conn.execute(f"SELECT {CHANNEL}").fetchall()[0]
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
                            if process == PROGRESS:
                                self._wakeup.progressed(run_id)
                            elif process != PROCESS:  # a sent event names its run
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


def create_schema(dsn: str, name: str, kwargs: dict[str, Any], where: str) -> None:
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


def redact(dsn: str) -> str:
    """The DSN with any password replaced by `***`, safe to log and show in errors."""
    dsn = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", dsn)
    return re.sub(r"(password\s*=\s*)\S+", r"\1***", dsn, flags=re.IGNORECASE)
