"""The benchmarks' PostgreSQL: which server they use, and the databases and schemas of their own
that each run creates empty and drops after (shared by every benchmark that needs one)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

DATABASE_PREFIX = os.environ.get("STATECHARTS_BENCH_PREFIX", "statecharts_bench")
"""The bench databases' names start with this (dropped and created per run): lanes sharing one
server set their own."""


def bench_dsn() -> str:
    """The PostgreSQL the durable benchmark uses."""
    return (
        os.environ.get("STATECHARTS_BENCH_DSN")
        or os.environ.get("STATECHARTS_TEST_DSN")
        or "postgresql://localhost/test"
    )


@contextmanager
def store_url_or_scratch(url: str | None, name: str) -> Iterator[str]:
    """`url`, else the bench DSN in a schema of its own named after `name` (dropped after):
    the profiles' default store. Prints the load average first (their figures depend on it)."""
    print("load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + " at the start")
    if url is not None:
        yield url
        return
    import psycopg

    schema, dsn = f"bench_{name}_{os.getpid()}", bench_dsn()
    try:
        yield f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def with_database(dsn: str, database: str) -> str:
    """``dsn`` (a URL) with its database name replaced."""
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", parts.query, ""))


def reset_database(dsn: str, database: str) -> None:
    """Drop ``database`` on the server of ``dsn`` (bench databases start empty every run)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(with_database(dsn, "postgres"), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
        )


@contextmanager
def scratch_database(dsn: str, database: str) -> Iterator[str]:
    """A new, empty ``database`` on the server of ``dsn`` (one left by an earlier run dropped
    first); its URL, and it is dropped afterwards."""
    import psycopg
    from psycopg import sql

    reset_database(dsn, database)
    with psycopg.connect(with_database(dsn, "postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    try:
        yield with_database(dsn, database)
    finally:
        reset_database(dsn, database)
