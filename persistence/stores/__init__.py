"""Run stores: the `Store` protocol and its SQLite, PostgreSQL and in-memory implementations."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from persistence.stores.errors import (
    ConflictError,
    RunFinishedError,
    RunNotFoundError,
    SchemaVersionError,
    StoreEncodingError,
    StoreError,
    StoreUnavailableError,
    StoreURLError,
)
from persistence.stores.protocol import Store
from persistence.stores.records import (
    ACTIVE,
    MAX_STORED_KEY_BYTES,
    TERMINAL_STATUSES,
    BreakerRecord,
    CallAttempt,
    CallEnd,
    CallFinish,
    CallRecord,
    ClaimRecord,
    DeadLetter,
    Delivery,
    EffectOutcome,
    EffectRecord,
    EventProgress,
    EventRecord,
    Fork,
    Grant,
    InboxEvent,
    JournalEntry,
    LimitUsage,
    NewEffect,
    NewRun,
    PendingWork,
    PurgedRun,
    RunPurgedError,
    RunQuery,
    RunRecord,
    ScheduleRecord,
    StepCommit,
    Tombstone,
    VersionCount,
    stored_key_problem,
)

__all__ = [
    "ACTIVE",
    "MAX_STORED_KEY_BYTES",
    "TERMINAL_STATUSES",
    "BreakerRecord",
    "CallAttempt",
    "CallEnd",
    "CallFinish",
    "CallRecord",
    "ClaimRecord",
    "ConflictError",
    "DeadLetter",
    "Delivery",
    "EffectOutcome",
    "EffectRecord",
    "EventProgress",
    "EventRecord",
    "Fork",
    "Grant",
    "InboxEvent",
    "JournalEntry",
    "LimitUsage",
    "NewEffect",
    "NewRun",
    "PendingWork",
    "PurgedRun",
    "RunFinishedError",
    "RunNotFoundError",
    "RunPurgedError",
    "RunQuery",
    "RunRecord",
    "ScheduleRecord",
    "SchemaVersionError",
    "StepCommit",
    "Store",
    "StoreEncodingError",
    "StoreError",
    "StoreURLError",
    "StoreUnavailableError",
    "Tombstone",
    "VersionCount",
    "open_store",
    "split_postgres_url",
    "stored_key_problem",
]


def open_store(
    url: str, *, migrate: bool = False, check: bool = True, max_connections: int = 8
) -> Store:
    """Open the store a URL names.

    - `sqlite:///relative/path.db`, `sqlite:////absolute/path.db` (optional `?synchronous=normal`)
    - `postgresql://user@host/db` or `postgres://...` (optional `?schema=name`; behind a
      connection pooler `?pooler=transaction` or `?pooler=session`, and `?listen_dsn=` a
      percent-encoded URL that reaches PostgreSQL directly for wake-ups; other query parameters
      go to libpq; see docs/persistence.md, "Connection poolers")
    - `citus://user@host/db` (a Citus coordinator: the PostgreSQL options, and `?shards=N`
      shards per table when `migrate` distributes them; docs/citus.md)
    - `memory://` (tests only; nothing survives the process)

    With `migrate=True` missing migrations are applied; with `check=True` (default) a schema that
    is older or newer than this code raises `SchemaVersionError`. `max_connections` sizes the
    PostgreSQL pool (a worker needs its concurrency plus one).
    """
    store = _open(url, max_connections)
    try:
        if migrate:
            store.migrate()
        if check:
            store.check_schema()
    except BaseException:
        store.close()
        raise
    return store


def _open(url: str, max_connections: int) -> Store:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        from persistence.stores.sqlite import SQLiteStore

        path = url.split("://", 1)[1].split("?", 1)[0]
        path = path[1:] if path.startswith("/") else path
        if not path:
            raise StoreURLError(f"sqlite URL needs a file path, e.g. sqlite:///runs.db: {url!r}")
        options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        unknown = set(options) - {"synchronous"}
        if unknown:
            raise StoreURLError(f"unknown sqlite URL option(s) {sorted(unknown)} in {url!r}")
        return SQLiteStore(path, synchronous=options.get("synchronous", "full"))
    if scheme in ("postgresql", "postgres", "citus"):
        from persistence.stores.postgres import PostgresStore
        from persistence.stores.postgres_connections import redact

        citus = scheme == "citus"
        dsn, options = split_postgres_url(
            parts._replace(scheme="postgresql").geturl() if citus else url, citus=citus
        )
        try:
            kwargs: dict[str, Any] = {
                "max_size": max_connections,
                "schema": options.get("schema"),
                "pooler": options.get("pooler"),
                "listen_dsn": options.get("listen_dsn"),
            }
            if citus:
                from persistence.stores.citus import CitusStore

                return CitusStore(dsn, shards=_shards(options.get("shards", "32")), **kwargs)
            return PostgresStore(dsn, **kwargs)
        except StoreURLError:  # (it names the URL already)
            raise
        except ValueError as exc:
            raise StoreURLError(f"{exc} (in {redact(dsn)})") from exc
    if scheme == "memory":
        from persistence.stores.memory import MemoryStore

        return MemoryStore()
    raise StoreURLError(
        f"unknown store URL scheme {parts.scheme!r} in {url.split('@')[-1]!r}; "
        "use sqlite:///path.db, postgresql://..., citus://... or memory://"
    )


def _shards(text: str) -> int:
    """A `citus://` URL's `shards=` as a number."""
    try:
        return int(text)
    except ValueError:
        raise StoreURLError(f"shards= must be a whole number: {text!r}") from None


STORE_OPTIONS = ("schema", "pooler", "listen_dsn")
"""The query parameters of a PostgreSQL store URL that are the store's, not libpq's."""


def split_postgres_url(url: str, *, citus: bool = False) -> tuple[str, dict[str, str]]:
    """A PostgreSQL store URL as the DSN libpq takes (its other query parameters as they were
    written) and the store's own options (`STORE_OPTIONS`, with `citus` also `shards`, the
    last of each given, decoded: `listen_dsn` is a percent-encoded URL)."""
    parts = urlsplit(url)
    options: dict[str, str] = {}
    rest: list[str] = []
    known = (*STORE_OPTIONS, "shards") if citus else STORE_OPTIONS
    for item in filter(None, parts.query.split("&")):
        name, _, value = item.partition("=")
        if unquote(name) in known:
            options[unquote(name)] = unquote(value)
        else:
            rest.append(item)
    return parts._replace(query="&".join(rest)).geturl(), options
