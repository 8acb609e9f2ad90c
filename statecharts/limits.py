"""How deep the engine lets input nest, so that hostile or broken input (a config, a persisted
snapshot, a machine file) gets a clear error naming where it goes too deep, never a
``RecursionError`` from somewhere inside the engine."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_STATE_DEPTH = 100
"""States nest at most this deep below the root."""

MAX_DELAY = 2**53 - 1
"""The longest delay in ms (about 285,000 years): the largest integer every JSON reader keeps
exactly, so a timer's due time always persists."""

MAX_NESTING = 250
"""Mappings and lists nest at most this deep in a machine config or a JSON value (within what
orjson writes, 254, and well within Python's recursion limit)."""


def too_deep(value: Any, limit: int = MAX_NESTING, path: str = "") -> str | None:
    """The path (``states.a.on.E[0]``) where ``value`` first nests deeper than ``limit``
    mappings and lists, or None. Iterative, so it works on any depth."""
    stack: list[tuple[Any, int, str]] = [(value, 0, path)]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, Mapping):
            children = ((f"{where}.{k}" if where else str(k), v) for k, v in item.items())
        elif isinstance(item, list | tuple):
            children = ((f"{where}[{i}]", v) for i, v in enumerate(item))
        else:
            continue
        if depth >= limit:
            return where or "<root>"
        stack.extend(
            (v, depth + 1, p) for p, v in children if isinstance(v, Mapping | list | tuple)
        )
    return None


def shorten(path: str, keep: int = 80) -> str:
    """A long path with its middle elided, for error messages."""
    return path if len(path) <= 2 * keep + 5 else f"{path[:keep]} ... {path[-keep:]}"
