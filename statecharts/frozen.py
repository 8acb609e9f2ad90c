"""Immutable JSON values: the only kind of data context, events and outputs may hold.

``freeze`` checks that a value is made of JSON types (dict with str keys, list/tuple, str, int,
float, bool, None) that every store holds exactly, and returns a deeply immutable copy; mutation
raises ``TypeError``. "Exactly" is one rule for every store (so a machine tested on SQLite
behaves the same on PostgreSQL): integers within signed 64 bits, finite floats, and strings (and
keys) of valid Unicode without NUL characters (``jsonb`` refuses ``\u0000``, UTF-8 has no lone
surrogates).
``FrozenDict`` and ``FrozenList`` subclass ``dict`` and ``list`` so they compare equal to plain
values and serialize with orjson without conversion.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn

from .errors import ContextError
from .limits import MAX_NESTING, shorten


def _immutable(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(f"{type(self).__name__} is immutable; build a new value with assign()")


class FrozenDict(dict[str, Any]):
    """A dict that cannot be changed after it is built."""

    # no slot to cache the hash in: the engine builds a context per assign and hashes none, so
    # a slot cost every context 8 bytes and its clearing on every dealloc, for a rare call
    __slots__ = ()

    __setitem__ = __delitem__ = _immutable
    clear = pop = popitem = setdefault = update = _immutable  # type: ignore[assignment]
    __ior__ = _immutable  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __reduce__(self) -> NoReturn:
        raise TypeError("statecharts values are persisted as JSON, never pickled")

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: object) -> FrozenDict:
        return self

    # printed like the plain dict it equals; type(value) tells it is frozen
    __repr__ = dict.__repr__


class FrozenList(list[Any]):
    """A list that cannot be changed after it is built."""

    __slots__ = ()

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _immutable  # type: ignore[assignment]
    append = extend = insert = pop = remove = clear = sort = reverse = _immutable  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self))

    def __reduce__(self) -> NoReturn:
        raise TypeError("statecharts values are persisted as JSON, never pickled")

    def __copy__(self) -> FrozenList:
        return self

    def __deepcopy__(self, memo: object) -> FrozenList:
        return self

    __repr__ = list.__repr__


EMPTY = FrozenDict()
_SCALARS = (str, int, float, bool, type(None))
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
"""The integers every store holds exactly (signed 64 bits: SQLite's integer, orjson's limit)."""
# Hot paths test ``value <= 0x3FFFFFFF and value >= -0x3FFFFFFF`` (written out: a constant, not
# a global; two comparisons, as a chained one copies and swaps the value between them) before
# INT_MIN..INT_MAX: CPython compares one-digit integers by a specialized instruction,
# the 64-bit bounds by a generic call (callgrind: about 240 instructions less per value).


def scalar_problem(value: Any) -> str | None:
    """Why a JSON scalar cannot be stored exactly, or None when it can."""
    kind = type(value)
    if kind is str:
        return text_problem(value)
    if kind is int:
        if INT_MIN <= value <= INT_MAX:
            return None
        shown = value if value.bit_length() < 256 else f"of {value.bit_length()} bits"
        return f"integer {shown} is outside the signed 64-bit range every store holds"
    if kind is float:
        return None if math.isfinite(value) else f"{value!r} is not a JSON number"
    if isinstance(value, str):
        return text_problem(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return scalar_problem(int(value))
    if isinstance(value, float):
        return scalar_problem(float(value))
    return None


def text_problem(text: str) -> str | None:
    """Why a string cannot be stored exactly (a NUL character, a lone surrogate), or None."""
    if "\x00" in text:
        return f"string {text[:40]!r} contains a NUL character, which PostgreSQL cannot store"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            return (
                f"string {text[:40]!r} contains a lone surrogate "
                f"({text[exc.start]!r}), which is not valid Unicode"
            )
    return None


def freeze(
    value: Any,
    path: str = "",
    error: Callable[[str, str], Exception] = ContextError,
    depth: int = 0,
) -> Any:
    """Return ``value`` as an immutable JSON value, or raise ``error(path, reason)``: also
    when mappings and lists nest deeper than ``MAX_NESTING`` (``depth`` is how deep ``value``
    already is), which no store writes (orjson stops at 254) and Python would not recurse
    through."""
    kind = type(value)
    # the common exact types first, each with the cheapest test that proves it storable
    if kind is str:
        if "\x00" not in value and value.isascii():
            return value
    elif kind is int:
        if INT_MIN <= value <= INT_MAX:
            return value
    elif kind is float:
        if math.isfinite(value):
            return value
    elif kind is bool or value is None or kind is FrozenDict or kind is FrozenList:
        return value
    if isinstance(value, FrozenDict | FrozenList):
        return value
    if isinstance(value, _SCALARS):
        problem = scalar_problem(value)
        if problem is not None:
            raise error(path or "<root>", problem)
        return value
    if isinstance(value, Mapping | list | tuple) and depth >= MAX_NESTING:
        raise error(
            shorten(path or "<root>"),
            f"mappings and lists nest deeper than {MAX_NESTING} levels here",
        )
    if isinstance(value, Mapping):
        items = {}
        for key, item in value.items():
            if type(key) is not str and not isinstance(key, str):
                raise error(_join(path, repr(key)), "keys must be strings in JSON")
            if "\x00" in key or not key.isascii():
                key_problem = text_problem(key)
                if key_problem is not None:
                    raise error(_join(path, repr(key)), f"key: {key_problem}")
            items[key] = freeze(item, _join(path, key), error, depth + 1)
        return FrozenDict(items)
    if isinstance(value, list | tuple):
        return FrozenList(
            freeze(item, f"{path}[{i}]", error, depth + 1) for i, item in enumerate(value)
        )
    raise error(
        path or "<root>", f"{type(value).__name__} value {value!r:.60} is not JSON-serializable"
    )


def storable_text(text: str) -> str:
    """`text` with what no store holds (NUL, lone surrogates) written as escapes, for error
    messages and other text that must be recorded whatever it contains."""
    if text_problem(text) is None:
        return text
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def thaw(value: Any) -> Any:
    """Return a plain, mutable deep copy of a frozen value."""
    if isinstance(value, dict):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, list):
        return [thaw(item) for item in value]
    return value


def check_key(key: Any, path: str = "") -> None:
    """Raise ``ContextError`` unless ``key`` is a context key every store holds."""
    if type(key) is not str:
        raise ContextError(repr(key), "context keys must be strings")
    key_problem = text_problem(key)
    if key_problem is not None:
        raise ContextError(_join(path, repr(key)), f"key: {key_problem}")


def frozen_update(base: FrozenDict, changes: Mapping[str, Any], path: str = "") -> FrozenDict:
    """Return ``base`` with ``changes`` applied; only the changed values are frozen anew."""
    for key in changes:
        if type(key) is not str or "\x00" in key or not key.isascii():
            check_key(key, path)
    # built as a plain dict first: FrozenDict copies an exact dict by dict's fastest path
    # (callgrind: a quarter fewer instructions than FrozenDict(base, **changes))
    fresh = {**base}
    for key, item in changes.items():
        # the commonest case (a small integer) tested before the call to ``as_is``
        if not (type(item) is int and item <= 0x3FFFFFFF and item >= -0x3FFFFFFF) and not as_is(
            item
        ):
            item = freeze(item, _join(path, key))  # checks it, naming the key
        fresh[key] = item
    return FrozenDict(fresh)


Merge = Callable[[FrozenDict, Any], FrozenDict]
"""A compiled assign: ``merge(context, event)`` -> the new context (see ``merger``)."""


def merger(items: Iterable[tuple[str, Any, bool]]) -> Merge:
    """``frozen_update`` compiled for one ``assign`` of a mapping: ``items`` are its ``(key,
    value, computed)``, ``computed`` values called as ``value(context, event)`` (an exception
    from one propagates as it is). Keys are checked and constants frozen here, once
    (``ContextError`` naming the key); a computed value is checked when it is made, as
    ``frozen_update`` checks it. The commonest assign, one computed key, gets a function of its
    own."""
    compiled: list[tuple[str, Any, bool]] = []
    for key, value, computed in items:
        check_key(key)
        compiled.append((key, value if computed else freeze(value, key), computed))
    if len(compiled) == 1 and compiled[0][2]:
        ((key, compute, _),) = compiled
        return _merge_one(key, compute)
    return _merge_many(tuple(compiled))


def _merge_one(key: str, compute: Callable[[FrozenDict, Any], Any]) -> Merge:
    def merge(context: FrozenDict, event: Any) -> FrozenDict:
        value = compute(context, event)
        if not (type(value) is int and value <= 0x3FFFFFFF and value >= -0x3FFFFFFF) and not as_is(
            value
        ):
            value = freeze(value, key)
        fresh = {**context}  # a plain dict: FrozenDict copies it by dict's fastest path
        fresh[key] = value
        return FrozenDict(fresh)

    return merge


def _merge_many(items: tuple[tuple[str, Any, bool], ...]) -> Merge:
    def merge(context: FrozenDict, event: Any) -> FrozenDict:
        fresh = {**context}
        for key, value, computed in items:
            if computed:
                value = value(context, event)
                if not (
                    type(value) is int and value <= 0x3FFFFFFF and value >= -0x3FFFFFFF
                ) and not as_is(value):
                    value = freeze(value, key)
            fresh[key] = value
        return FrozenDict(fresh)

    return merge


def as_is(item: Any) -> bool:
    """True for the values a context takes unchanged: already immutable and storable (the
    common cases, each with the cheapest test that proves it; ``freeze`` judges the rest)."""
    kind = type(item)
    if kind is int:
        return (item <= 0x3FFFFFFF and item >= -0x3FFFFFFF) or INT_MIN <= item <= INT_MAX  # type: ignore[no-any-return]
    if kind is str:
        return "\x00" not in item and item.isascii()  # type: ignore[no-any-return]
    return kind is bool or item is None or kind is FrozenDict or kind is FrozenList


def frozen_tuple(items: Iterable[Any]) -> tuple[Any, ...]:
    """A tuple of frozen values (for effect arguments)."""
    return tuple(freeze(item) for item in items)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
