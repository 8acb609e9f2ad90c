"""Search attributes: fields of a run's context indexed in `workflow_search`, found with
`RunQuery(search=...)` (`statecharts runs list --where customer=42`).

A workflow names them in its definition (`meta={"search": ["customer", "region"]}` at the
root) or in the runtime (`Runtime(search={"order": ["customer"]})`, which wins). A name is a
context key, or a dotted path into nested objects (`"customer.id"`). A run's start inserts the
values it has; each step writes, in its own transaction, only the names whose values it changed
(most steps change none and write nothing).

Only scalars are indexed: a string as it is, a number or boolean as its JSON text (42,
3.5, true), so `--where customer=42` finds the int 42 and the string "42" alike. A value that
is missing, null, a list or an object, or a string longer than `MAX_VALUE_CHARS`, has no row:
such a run is not found by that name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from statecharts import Machine

MAX_VALUE_CHARS = 256
"""The longest string indexed (a B-tree entry stays small; longer values are not searchable)."""

SEARCH_META = "search"
"""The key of a definition's root `meta` that names its search attributes."""


def declared_fields(machine: Machine) -> tuple[str, ...]:
    """The search attributes `machine`'s root `meta` names; `ValueError` naming the machine
    when `meta.search` is not a list of non-empty strings."""
    meta = machine.root.meta
    if not isinstance(meta, Mapping) or SEARCH_META not in meta:
        return ()
    return check_fields(meta[SEARCH_META], f"{machine.id}: meta.search")


def check_fields(names: Any, where: str) -> tuple[str, ...]:
    """`names` as a tuple of attribute names, or `ValueError` naming `where` and the bad one."""
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise ValueError(f"{where}: expected a list of context field names, got {names!r}")
    for name in names:
        if not isinstance(name, str) or not name or "=" in name or name.strip() != name:
            raise ValueError(
                f"{where}: {name!r} is not a field name (a context key or dotted "
                "path, without '=' or surrounding spaces)"
            )
    return tuple(dict.fromkeys(names))


def indexed_text(value: Any) -> str | None:
    """The text `value` is indexed as, or None when it is not indexed (see the module)."""
    if isinstance(value, str):
        return value if len(value) <= MAX_VALUE_CHARS else None
    if isinstance(value, bool | int | float):
        return orjson.dumps(value).decode()
    return None


def _at(context: Any, path: str) -> Any:
    """The value at dotted `path` in `context`, or None."""
    value = context
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def values_of(fields: Iterable[str], context: Any) -> dict[str, str]:
    """The indexed values of `fields` in `context` (a run's context), by name."""
    found = {name: indexed_text(_at(context, name)) for name in fields}
    return {name: text for name, text in found.items() if text is not None}


def changed(fields: Sequence[str], before: Any, after: Any) -> dict[str, str | None]:
    """What a step from context `before` to `after` writes: each name whose indexed value
    changed, with its new value (None: it no longer has one). Empty when the contexts are the
    same object (the common step, which leaves the context alone) or none changed."""
    if not fields or before is after:
        return {}
    old, new = values_of(fields, before), values_of(fields, after)
    return {name: new.get(name) for name in fields if old.get(name) != new.get(name)}


def search_terms(values: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """`{"customer": 42}` as the (name, value) pairs of `RunQuery.search`, each value as it is
    indexed; `ValueError` naming a value that is never indexed (no run could match it)."""
    terms = []
    for name, value in values.items():
        text = indexed_text(value)
        if text is None:
            raise ValueError(
                f"search[{name!r}]: {value!r:.60} is never indexed (a string of at "
                f"most {MAX_VALUE_CHARS} characters, a number or a boolean)"
            )
        terms.append((name, text))
    return tuple(terms)


def parse_where(terms: Iterable[str], option: str = "--where") -> tuple[tuple[str, str], ...]:
    """`NAME=VALUE` terms as (name, value) pairs (all must hold); `ValueError` naming the
    term that is not of that form."""
    pairs = []
    for term in terms:
        name, sep, value = term.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"{option} {term!r}: expected NAME=VALUE, e.g. customer=42")
        pairs.append((name.strip(), value))
    return tuple(pairs)
