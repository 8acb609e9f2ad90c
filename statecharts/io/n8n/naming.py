"""Names for the statechart side of an n8n import: state keys, event names, JSON paths.

n8n names nodes freely ("Any alerts?", "On clicking 'execute'"); statechart state keys, event
names and Python identifiers are stricter, so every name is derived here, in one place, and made
unique where it must be.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

_NOT_WORD = re.compile(r"[^a-z0-9]+")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def snake(text: str, fallback: str = "node", max_length: int | None = None) -> str:
    """``"Any alerts?"`` -> ``"any_alerts"``; accents folded, never empty, never a leading
    digit (state keys double as parts of Python names in the skeleton); cut at a word
    boundary to ``max_length`` when given (diagram labels stay readable)."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    key = _NOT_WORD.sub("_", folded.lower()).strip("_") or fallback
    if max_length is not None and len(key) > max_length:
        cut = key.rfind("_", 0, max_length + 1)
        key = key[: cut if cut > 0 else max_length].rstrip("_")
    return f"n_{key}" if key[0].isdigit() else key


def unique(base: str, taken: Iterable[str] | set[str]) -> str:
    """``base``, or ``base_2``, ``base_3``, ... whichever is not in ``taken``."""
    used = taken if isinstance(taken, set) else set(taken)
    if base not in used:
        return base
    n = 2
    while f"{base}_{n}" in used:
        n += 1
    return f"{base}_{n}"


def event_name(key: str) -> str:
    """The event for a state key: ``"schedule_trigger"`` -> ``"SCHEDULE_TRIGGER"``."""
    return key.upper()


def json_path(parent: str, key: str | int) -> str:
    """Append ``key`` to a JSON path: ``nodes[3].parameters``, ``connections["Any alerts?"]``."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    if _IDENTIFIER.match(key):
        return f"{parent}.{key}" if parent else key
    quoted = key.replace("\\", "\\\\").replace('"', '\\"')
    return f'{parent}["{quoted}"]'
