"""Versioned schema migrations shipped as SQL files in `persistence/migrations/<dialect>/`.

File names are `NNNN_description.sql`; NNNN is the schema version the file brings the database
to. Each store applies the missing files in order, each in one transaction together with its row
in `statecharts_schema_version`, and refuses to run against a schema older or newer than
`latest_version()`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from persistence.stores.errors import SchemaVersionError

VERSION_TABLE = "statecharts_schema_version"
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
DIALECTS = ("sqlite", "postgres")


@dataclass(frozen=True, slots=True)
class Migration:
    """One migration file."""

    version: int
    name: str
    sql: str


@cache
def migrations(dialect: str) -> tuple[Migration, ...]:
    """All migrations for `dialect` ("sqlite" or "postgres"), in version order."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown SQL dialect {dialect!r}; expected one of {DIALECTS}")
    folder = resources.files("persistence").joinpath("migrations", dialect)
    found: list[Migration] = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match is None:
            continue
        found.append(Migration(int(match.group(1)), match.group(2), entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    expected = list(range(1, len(found) + 1))
    if [m.version for m in found] != expected:
        raise RuntimeError(f"migrations for {dialect} are not numbered 1..n: {found!r}")
    return tuple(found)


def latest_version(dialect: str) -> int:
    """The schema version this code expects."""
    return len(migrations(dialect))


def pending(dialect: str, current: int) -> tuple[Migration, ...]:
    """Migrations to apply to a database at version `current`."""
    check_not_newer(dialect, current)
    return tuple(m for m in migrations(dialect) if m.version > current)


def check_not_newer(dialect: str, current: int) -> None:
    """Refuse a database written by newer code."""
    latest = latest_version(dialect)
    if current > latest:
        raise SchemaVersionError(
            f"database schema is at version {current}, newer than this code knows ({latest}); "
            "upgrade the statecharts package before using this database"
        )


def check_current(dialect: str, current: int, url: str) -> None:
    """Raise `SchemaVersionError` unless `current` is the latest version."""
    check_not_newer(dialect, current)
    latest = latest_version(dialect)
    if current < latest:
        raise SchemaVersionError(
            f"database schema is at version {current}, this code needs {latest}; run "
            f"`statecharts db upgrade --store {url}`"
        )
