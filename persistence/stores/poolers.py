"""Connection poolers (PgBouncer and the like) between a `PostgresStore` and PostgreSQL.

A pooler in *transaction* mode hands each transaction to whichever server connection is free,
so nothing that lives in a server session survives from one transaction to the next: psycopg's
server-side prepared statements ("prepared statement _pg3_N does not exist"), a `search_path`
set at connection time, a `LISTEN`. PgBouncer also refuses the `options` startup parameter
that the store uses for `?schema=` ("unsupported startup parameter: options"), in every mode.

`Pooling` holds what the store does instead, by the `pooler=` it was given:

- `"transaction"`: no prepared statements, the schema set by `SET LOCAL search_path` in a
  transaction around each use of a connection, no `LISTEN` through the pooler (a `listen_dsn`
  that reaches PostgreSQL directly or through a session pooler carries the wake-ups; without
  one, other processes' work is found by polling).
- `"session"`: the schema set once per connection (`SET search_path`), not as a startup option;
  the rest as without a pooler.
- `"none"`: a direct connection, as without `pooler=`, and nothing detected.
- not given: a direct connection, checked once per new connection: when the server's backend
  pid differs from the one the connection announced, a pooler is in between (PgBouncer sends a
  cancel key of its own), so prepared statements are turned off for that connection and the
  wake-up listener does not `LISTEN` through it (whether the pooler carries `LISTEN` depends on
  its mode, which cannot be asked), and a warning says which option to set.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from persistence.stores.errors import StoreURLError

log = logging.getLogger("statecharts.store")

POOLER_MODES = ("transaction", "session", "none")
"""The values of `pooler=` (`?pooler=` in a store URL)."""

_CHECKED = "_statecharts_pooler_checked"
"""The attribute that marks a connection already checked for a pooler (a caller's pool
configures its connections at every checkout)."""


def check_mode(mode: str | None) -> None:
    """`ValueError` naming `pooler=` when `mode` is none of `POOLER_MODES`."""
    if mode is not None and mode not in POOLER_MODES:
        raise ValueError(f"pooler must be one of {', '.join(POOLER_MODES)}: {mode!r}")


class Pooling:
    """How a store's connections work with (or detect) a connection pooler; see the module
    docstring. `schema`: the store's schema (a checked name), or None."""

    def __init__(self, mode: str | None, schema: str | None) -> None:
        check_mode(mode)
        self.mode, self.schema = mode, schema
        self._warned = False
        self._set_path = None if schema is None else f"SET search_path TO {schema}".encode()
        self.begin: bytes | None = (
            b"BEGIN; SET LOCAL search_path TO " + schema.encode()
            if mode == "transaction" and schema is not None
            else None
        )
        """What starts each use of a connection (transaction mode with a schema): the schema
        holds for that one transaction, on whichever server connection the pooler gives it."""

    def connect_kwargs(self) -> dict[str, Any]:
        """psycopg's connection arguments: autocommit, and by mode the schema as the `options`
        startup parameter (no pooler) or no prepared statements (transaction mode)."""
        kwargs: dict[str, Any] = {"autocommit": True}
        if self.schema is not None and self.mode in (None, "none"):
            kwargs["options"] = f"-c search_path={self.schema}"
        if self.mode == "transaction":
            kwargs["prepare_threshold"] = None
        return kwargs

    def configure(self, conn: psycopg.Connection[Any]) -> None:
        """Set up a new connection (once; a caller's pool calls this at every checkout): the
        session's schema in session mode, the pooler check when no mode was given."""
        if getattr(conn, _CHECKED, False):
            return
        if self.mode == "session" and self._set_path is not None:
            conn.execute(self._set_path)
        elif self.mode == "transaction":
            conn.prepare_threshold = None  # (a caller's pool was not told)
        elif self.mode is None and behind_pooler(conn):
            conn.prepare_threshold = None
            if not self._warned:
                self._warned = True
                log.warning(
                    "a connection pooler sits between this store and PostgreSQL (the server's "
                    "backend pid is not the one the connection announced): prepared statements "
                    "are off; add ?pooler=transaction or ?pooler=session to the store URL "
                    "(docs/persistence.md, 'Connection poolers')"
                )
        setattr(conn, _CHECKED, True)

    def listen_path(self) -> bytes | None:
        """The statement a wake-up listener runs after connecting, to listen on its schema's
        channel (a session of its own: the schema as a plain `SET`)."""
        return self._set_path


def behind_pooler(conn: psycopg.Connection[Any]) -> bool:
    """Whether `conn` reaches PostgreSQL through a pooler: the backend pid the server reports
    is not the one the connection announced (a pooler announces a cancel key of its own)."""
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    return row is not None and int(row[0]) != conn.info.backend_pid


_REFUSED_OPTIONS = "unsupported startup parameter: options"
"""PgBouncer's refusal of the `options` startup parameter (every version, every mode)."""


def refused_options(exc: BaseException, where: str) -> StoreURLError | None:
    """The store's error for a connection a pooler refused because of `?schema=`'s startup
    option (`where`: the redacted URL), or None for any other error."""
    if _REFUSED_OPTIONS not in str(exc):
        return None
    return StoreURLError(
        f"a connection pooler at {where} refused the startup parameter `options`, which "
        "?schema= uses without a pooler: add ?pooler=transaction (or ?pooler=session, as "
        "the pooler's pool_mode is) to the store URL, or pooler= to PostgresStore "
        f"(docs/persistence.md, 'Connection poolers'); the server said: {str(exc).strip()}"
    )
