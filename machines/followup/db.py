"""The follow-up database: connections by URL, transactions, and the schema migrations.

``Database("sqlite:///followup.db")`` or ``Database("postgresql://host/db?schema=followup")``.
Every statement is parameterized; SQL is written once with ``?`` placeholders and handed to
psycopg with ``%s``. Any driver error becomes ``DatabaseError``: the failure class that fails a
run (the next run would act on a false picture), unlike third-party failures.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MIGRATIONS = Path(__file__).with_name("migrations")
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


class DatabaseError(Exception):
    """The follow-up database failed (connection, lock, constraint, missing table...)."""


class Transaction:
    """Statements inside one transaction."""

    def __init__(self, cursor: Any, dialect: str) -> None:
        self._cursor = cursor
        self.dialect = dialect

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self.dialect == "postgresql" else sql

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run a statement; the number of rows it changed."""
        try:
            self._cursor.execute(self._sql(sql), tuple(params))
        except (sqlite3.Error, _pg_error()) as exc:
            raise DatabaseError(f"{type(exc).__name__}: {exc}") from exc
        return int(self._cursor.rowcount)

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """A query's rows as dicts (dates as ISO strings, whatever the backend)."""
        self.execute(sql, params)
        names = [d[0] for d in self._cursor.description]
        return [{n: _plain(v) for n, v in zip(names, row)} for row in self._cursor.fetchall()]

    def one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        """The first row of a query, or None."""
        found = self.rows(sql, params)
        return found[0] if found else None


class Database:
    """The follow-up database at ``url`` (connects lazily, one connection per thread)."""

    def __init__(self, url: str, *, timeout_s: float = 10.0) -> None:
        parts = urlsplit(url)
        self.url = url
        self.timeout_s = timeout_s
        self.dialect = {
            "sqlite": "sqlite",
            "postgresql": "postgresql",
            "postgres": "postgresql",
        }.get(parts.scheme.lower(), "")
        if not self.dialect:
            raise ValueError(f"database URL {url!r}: use sqlite:///path.db or postgresql://host/db")
        self.schema: str | None = None
        if self.dialect == "sqlite":
            path = url.split("://", 1)[1].split("?", 1)[0]
            self._target = path[1:] if path.startswith("/") else path
            if not self._target:
                raise ValueError(f"database URL {url!r}: no file path")
        else:
            query = dict(parse_qsl(parts.query))
            self.schema = query.pop("schema", None)
            if self.schema is not None and not _SCHEMA_NAME.match(self.schema):
                raise ValueError(f"database URL {url!r}: schema must match {_SCHEMA_NAME.pattern}")
            self._target = urlunsplit(parts._replace(query=urlencode(query)))
        self._local = threading.local()
        self._all: list[Any] = []
        self._all_lock = threading.Lock()

    def _connect(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        try:
            if self.dialect == "sqlite":
                conn = sqlite3.connect(
                    self._target,
                    timeout=self.timeout_s,
                    isolation_level=None,
                    check_same_thread=False,
                )
                conn.execute("pragma foreign_keys = on")
                conn.execute("pragma journal_mode = wal")
            else:
                import psycopg

                conn = psycopg.connect(
                    self._target, autocommit=True, connect_timeout=max(1, int(self.timeout_s))
                )
                if self.schema:
                    conn.execute(f'create schema if not exists "{self.schema}"')
                    conn.execute(f'set search_path to "{self.schema}"')
        except (sqlite3.Error, _pg_error()) as exc:
            raise DatabaseError(f"cannot connect to the follow-up database: {exc}") from exc
        self._local.conn = conn
        with self._all_lock:
            self._all.append(conn)
        return conn

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """A transaction: committed when the block ends, rolled back if it raises."""
        conn = self._connect()
        cursor = conn.cursor()
        begin = "begin immediate" if self.dialect == "sqlite" else "begin"
        try:
            cursor.execute(begin)
        except (sqlite3.Error, _pg_error()) as exc:
            raise DatabaseError(f"{type(exc).__name__}: {exc}") from exc
        try:
            yield Transaction(cursor, self.dialect)
        except BaseException:
            try:
                cursor.execute("rollback")
            except (sqlite3.Error, _pg_error()):
                self._forget(conn)
            raise
        try:
            cursor.execute("commit")
        except (sqlite3.Error, _pg_error()) as exc:
            self._forget(conn)
            raise DatabaseError(f"commit failed: {exc}") from exc

    def _forget(self, conn: Any) -> None:
        self._local.conn = None
        with contextlib.suppress(Exception):  # closing a broken connection may fail too
            conn.close()

    def close(self) -> None:
        """Close every connection this object opened."""
        with self._all_lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()

    # -- migrations ---------------------------------------------------------------------------

    def migrations(self) -> list[tuple[int, Path]]:
        """(version, file) of each migration shipped for this backend, in order."""
        folder = MIGRATIONS / self.dialect
        found = []
        for file in sorted(folder.glob("*.sql")):
            number = file.name.split("_", 1)[0]
            if not number.isdigit():
                raise ValueError(f"{file}: a migration file name starts with its number")
            found.append((int(number), file))
        return found

    def migrate(self) -> list[int]:
        """Apply the migrations not applied yet; return their versions."""
        applied: list[int] = []
        with self.transaction() as tx:
            tx.execute(
                "create table if not exists followup_migrations (version integer "
                "primary key, name text not null)"
            )
            done = {int(r["version"]) for r in tx.rows("select version from followup_migrations")}
        for version, file in self.migrations():
            if version in done:
                continue
            with self.transaction() as tx:
                for statement in _statements(file.read_text()):
                    tx.execute(statement)
                tx.execute(
                    "insert into followup_migrations (version, name) values (?, ?)",
                    (version, file.name),
                )
            applied.append(version)
        return applied


def _statements(script: str) -> list[str]:
    """A migration split at semicolons that end a line (the files keep to that)."""
    lines = [line for line in script.splitlines() if not line.strip().startswith("--")]
    return [
        s.strip() for s in re.split(r";\s*$", "\n".join(lines), flags=re.MULTILINE) if s.strip()
    ]


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, date) else value


def _pg_error() -> type[Exception]:
    try:
        import psycopg
    except ImportError:  # without the postgres extra only SQLite is usable
        return sqlite3.Error
    return psycopg.Error
