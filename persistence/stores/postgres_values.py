"""PostgreSQL's values: times as `timestamptz` (epoch milliseconds in, exactly), JSON as
`jsonb` (orjson both ways), run ids as canonical `uuid` text.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

import orjson

from persistence.stores.dialect import RUN_NAMES
from persistence.stores.errors import (
    RunNotFoundError,
    StoreEncodingError,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


_MS = timedelta(milliseconds=1)


def to_ts(ms: int | None) -> datetime | None:
    """Epoch milliseconds to an aware datetime (exact)."""
    return None if ms is None else _EPOCH + ms * _MS


def to_ms(ts: datetime | None) -> int | None:
    """An aware datetime to epoch milliseconds (exact to the millisecond)."""
    return None if ts is None else (ts - _EPOCH) // _MS


def dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError as exc:  # orjson.JSONEncodeError: a value no store holds exactly
        raise StoreEncodingError(f"cannot store value: {exc}") from exc


def json_param(value: Any) -> str:
    """`value` as JSON text, the parameter of a `jsonb` (an untyped text parameter, which
    the server reads as the `jsonb` its place takes): what psycopg's `Jsonb` sends, without
    its dumper's two Python calls per parameter on the hot statements."""
    return dumps(value).decode()


def loads(data: bytes | str) -> Any:
    """orjson, or the standard parser for what orjson refuses (integers beyond 64 bits put
    there by hand): a row must always read, so that it can be listed and failed."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


RUN_COLUMNS = RUN_NAMES.replace("id,", "id::text,", 1)


def uuid_array(ids: list[str]) -> str:
    """Canonical uuids (`uuid_text`) as the text of a `uuid[]`, which SQL casts: nothing in them
    needs quoting, and psycopg's list adaptation (each element's type found, each one searched
    by a regular expression for what needs quoting) cost about 60k client instructions a step."""
    return "{" + ",".join(ids) + "}"


def canonical_id(run_id: str) -> str:
    """A new run's id as PostgreSQL will print it (left as given when it is no uuid: the insert
    then refuses it)."""
    try:
        return _printed(run_id)
    except ValueError:
        return run_id


def uuid_text(run_id: str) -> str:
    """A run id as PostgreSQL prints it, validated before it reaches a uuid column (a clear
    error, not a SQL one)."""
    try:
        return _printed(run_id)
    except (ValueError, TypeError, AttributeError):
        raise RunNotFoundError(f"no run with id {run_id!r} (not a uuid)") from None


@lru_cache(maxsize=4096)
def _printed(run_id: str) -> str:
    """The uuid `run_id` as PostgreSQL prints it (kept: a run's steps ask for its id again and
    again, and parsing a uuid costs more than the lookup)."""
    return str(uuid.UUID(run_id))
