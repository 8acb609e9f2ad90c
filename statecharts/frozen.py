"""Immutable JSON values: the only kind of data context, events and outputs may hold.

``freeze`` checks that a value is made of JSON types (dict with str keys, list/tuple, str, int,
float, bool, None) and returns a deeply immutable copy; mutation raises ``TypeError``.
``FrozenDict`` and ``FrozenList`` subclass ``dict`` and ``list`` so they compare equal to plain
values and serialize with orjson without conversion.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn

from .errors import ContextError


def _immutable(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(f"{type(self).__name__} is immutable; build a new value with assign()")


class FrozenDict(dict[str, Any]):
    """A dict that cannot be changed after it is built."""

    __slots__ = ("_hash",)

    __setitem__ = __delitem__ = _immutable
    clear = pop = popitem = setdefault = update = _immutable  # type: ignore[assignment]
    __ior__ = _immutable  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        try:
            return self._hash
        except AttributeError:
            self._hash: int = hash(frozenset(self.items()))
            return self._hash

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


def freeze(value: Any, path: str = "",
           error: Callable[[str, str], Exception] = ContextError) -> Any:
    """Return ``value`` as an immutable JSON value, or raise ``error(path, reason)``."""
    if isinstance(value, FrozenDict | FrozenList):
        return value
    if isinstance(value, _SCALARS):
        if isinstance(value, float) and not math.isfinite(value):
            raise error(path or "<root>", f"{value!r} is not a JSON number")
        return value
    if isinstance(value, Mapping):
        items = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise error(_join(path, repr(key)), "keys must be strings in JSON")
            items[key] = freeze(item, _join(path, key), error)
        return FrozenDict(items)
    if isinstance(value, list | tuple):
        return FrozenList(freeze(item, f"{path}[{i}]", error) for i, item in enumerate(value))
    raise error(path or "<root>",
                f"{type(value).__name__} value {value!r:.60} is not JSON-serializable")


def thaw(value: Any) -> Any:
    """Return a plain, mutable deep copy of a frozen value."""
    if isinstance(value, dict):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, list):
        return [thaw(item) for item in value]
    return value


def frozen_update(base: FrozenDict, changes: Mapping[str, Any], path: str = "") -> FrozenDict:
    """Return ``base`` with ``changes`` applied; only the changed values are frozen anew."""
    merged = dict(base)
    for key, item in changes.items():
        if type(key) is not str:
            raise ContextError(repr(key), "context keys must be strings")
        kind = type(item)
        if kind is int or kind is str or kind is bool or item is None:
            merged[key] = item  # the common case, already immutable
        else:
            merged[key] = freeze(item, _join(path, key))
    return FrozenDict(merged)


def frozen_tuple(items: Iterable[Any]) -> tuple[Any, ...]:
    """A tuple of frozen values (for effect arguments)."""
    return tuple(freeze(item) for item in items)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
