"""The runs table as the SQL stores read it: a `RunQuery` as a WHERE clause, the one status a
query fixes, and a row's values as a `RunRecord` (a row that does not parse names its problem)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from persistence.stores.errors import StoreError
from persistence.stores.records import ACTIVE, RunQuery, RunRecord
from persistence.stores.rules import SEALED


def known_status(query: RunQuery) -> str | None:
    """The one status every run matching `query` has, if the query fixes it (then a count
    needs no grouping, and can be answered from a partial index)."""
    if query.stuck_before is not None:
        return ACTIVE if query.status in (None, ACTIVE) else query.status
    return query.status


def run_query_sql(
    query: RunQuery, mark: str, time_param: Callable[[int], Any]
) -> tuple[str, list[Any]]:
    """The WHERE clause (or "") and its parameters for `query`, for SQL stores whose parameter
    marker is `mark` ("?" or "%s"); `time_param` converts epoch ms to the column's type."""
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (
        ("workflow_name", query.workflow_name),
        ("status", query.status),
        ("key", query.key),
        ("parent_run_id", query.parent_run_id),
    ):
        if value is not None:
            clauses.append(f"{column} = {mark}")
            params.append(value)
    if query.created_after is not None:
        clauses.append(f"created_at >= {mark}")
        params.append(time_param(query.created_after))
    if query.created_before is not None:
        clauses.append(f"created_at < {mark}")
        params.append(time_param(query.created_before))
    if query.stuck_before is not None:
        # updated_minute (the indexed minute of updated_at, schema 6) bounds the index range
        clauses.append(
            f"status = 'active' AND updated_minute < {mark} AND updated_at < {mark} "
            f"AND (wake_at IS NULL OR wake_at < {mark})"
        )
        params += [time_param(query.stuck_before)] * 3
    if query.state is not None:
        # The column holds leaves joined by commas: match a whole leaf or a leaf below `state`.
        pattern = _like_escaped(query.state)
        # `state >= ''` is always true; it lets the planner answer from an index on the state.
        clauses.append(
            f"state >= '' AND ((',' || state || ',') LIKE {mark} ESCAPE '\\' "
            f"OR (',' || state) LIKE {mark} ESCAPE '\\')"
        )
        params += [f"%,{pattern},%", f"%,{pattern}.%"]
    if query.id_prefix is not None:
        clauses.append(f"CAST(id AS TEXT) LIKE {mark} ESCAPE '\\'")  # PostgreSQL: a uuid
        params.append(_like_escaped(query.id_prefix) + "%")
    for name, value in query.search:  # (each answered from workflow_search_value, index-only)
        clauses.append(
            f"id IN (SELECT run_id FROM workflow_search WHERE name = {mark} AND value = {mark})"
        )
        params += [name, value]
    return ("WHERE " + " AND ".join(clauses) if clauses else ""), params


def _like_escaped(text: str) -> str:
    """`text` as a LIKE pattern matching only itself (escape character backslash)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def broken_reason(problems: Sequence[str]) -> str:
    """The `last_error` of a row that does not parse."""
    return "row does not parse: " + "; ".join(problems)


_RUN_FIELDS: tuple[tuple[str, Any], ...] = (
    ("id", str),
    ("workflow_name", str),
    ("workflow_version", str),
    ("key", (str, type(None))),
    ("state", str),
    ("snapshot", dict),
    ("status", str),
    ("attempt_count", int),
    ("created_at", int),
    ("updated_at", int),
    ("completed_at", (int, type(None))),
    ("failed_at", (int, type(None))),
    ("last_error", (str, type(None))),
    ("wake_at", (int, type(None))),
    ("lease_owner", (str, type(None))),
    ("lease_expires_at", (int, type(None))),
    ("version", int),
    ("claim_count", int),
    ("traceparent", (str, type(None))),
    ("parent_run_id", (str, type(None))),
    ("parent_invoke_id", (str, type(None))),
    ("priority", int),
    ("waiting_for", (str, type(None))),
)

_EMPTY_OF: dict[Any, Any] = {str: "", int: 0, dict: {}}


def parse_run(
    values: list[Any],
    loads: Callable[[Any], Any] | None = None,
    previous_owner: str | None = None,
    due_at: int | None = None,
    opens: Callable[[Any, str], Any] | None = None,
) -> RunRecord:
    """A `RunRecord` from a row's values in `RunRecord` field order (the snapshot as text when
    `loads` is given; a sealed snapshot opened by `opens`, given it and the run id). A row
    that does not parse (or whose snapshot does not open: a missing key) is never an
    exception: the record carries the `problem` (and harmless empty values), so listings
    show it and claims fail it."""
    problems: list[str] = []
    if loads is not None and isinstance(values[5], str | bytes):
        try:
            values[5] = loads(values[5])
        except ValueError as exc:
            problems.append(f"snapshot is not JSON ({exc})")
            values[5] = {}
    if opens is not None and type(values[5]) is dict and SEALED in values[5]:
        try:
            values[5] = opens(values[5], str(values[0]))
        except StoreError as exc:  # the codec's PayloadKeyError, PayloadTamperedError
            problems.append(str(exc))
            values[5] = {}
    for i, (name, kind) in enumerate(_RUN_FIELDS):
        value = values[i]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            problems.append(f"{name} holds {type(value).__name__} {value!r:.40}")
            values[i] = None if isinstance(kind, tuple) else _EMPTY_OF[kind]
    if problems:
        return RunRecord(
            *values,
            problem=broken_reason(problems),  # type: ignore[misc]
            previous_owner=previous_owner,
            due_at=due_at,
        )
    return RunRecord(*values, previous_owner=previous_owner, due_at=due_at)  # type: ignore[misc]
