"""Run stores: the `Store` protocol and its SQLite, PostgreSQL and in-memory implementations."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from persistence.stores.base import (
    ACTIVE,
    MAX_STORED_KEY_BYTES,
    TERMINAL_STATUSES,
    BreakerRecord,
    CallAttempt,
    CallEnd,
    CallFinish,
    CallRecord,
    ClaimRecord,
    ConflictError,
    DeadLetter,
    Delivery,
    EffectOutcome,
    EffectRecord,
    EventProgress,
    EventRecord,
    Fork,
    Grant,
    Handover,
    InboxEvent,
    JournalEntry,
    LimitUsage,
    NewEffect,
    NewRun,
    PendingWork,
    PurgedRun,
    RunFinishedError,
    RunNotFoundError,
    RunPurgedError,
    RunQuery,
    RunRecord,
    ScheduleRecord,
    SchemaVersionError,
    StepCommit,
    Store,
    StoreEncodingError,
    StoreError,
    StoreUnavailableError,
    StoreURLError,
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
    "Handover",
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
    "stored_key_problem",
]


def open_store(
    url: str, *, migrate: bool = False, check: bool = True, max_connections: int = 8
) -> Store:
    """Open the store a URL names.

    - `sqlite:///relative/path.db`, `sqlite:////absolute/path.db` (optional `?synchronous=normal`)
    - `postgresql://user@host/db` or `postgres://...` (optional `&schema=name`, other query
      parameters go to libpq)
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
    if scheme in ("postgresql", "postgres"):
        from persistence.stores.postgres import PostgresStore, redact

        query = parse_qs(parts.query, keep_blank_values=True)
        schema = query.pop("schema", [None])[-1]
        rest = "&".join(f"{k}={v}" for k, values in query.items() for v in values)
        dsn = parts._replace(query=rest).geturl()
        try:
            return PostgresStore(dsn, schema=schema, max_size=max_connections)
        except ValueError as exc:
            raise StoreURLError(f"{exc} (in {redact(url)})") from exc
    if scheme == "memory":
        from persistence.stores.memory import MemoryStore

        return MemoryStore()
    raise StoreURLError(
        f"unknown store URL scheme {parts.scheme!r} in {url.split('@')[-1]!r}; "
        "use sqlite:///path.db, postgresql://... or memory://"
    )
