"""Values of a machine diff in words: retry policies as the diagram words them, changed
policies as only the parts that changed ("retries up to 2 times → 4 times"), and short values
("null", "'followup_alerts'")."""

from __future__ import annotations

from typing import Any

import orjson

from ..render.retries import retry_phrase
from ..retry_policy import RetryPolicy

ARROW = " → "
_LONGEST_VALUE = 100


def value_text(value: Any) -> str:
    """A config value as a reader sees it: "none" for nothing, JSON otherwise (shortened)."""
    if value is None:
        return "none"
    text = orjson.dumps(value, default=str, option=orjson.OPT_SORT_KEYS).decode()
    return text if len(text) <= _LONGEST_VALUE else text[: _LONGEST_VALUE - 1] + "…"


def json_text(value: Any) -> str:
    """A data value as JSON ("null", "0", "[]"), shortened."""
    return "null" if value is None else value_text(value)


def retry_words(policy: RetryPolicy | None) -> str:
    """The whole policy in one line: "retries up to 3 times, waiting 1 s, 2 s, 4 s"."""
    return "no retries" if policy is None else ", ".join(_facts(policy))


def retry_change(old: RetryPolicy | None, new: RetryPolicy | None) -> str:
    """What changed between two policies, fact by fact, each "old → new" with the words both
    share said once: "retries up to 2 times → 4 times; waiting 500 ms between tries → 1 s
    between tries"."""
    if old is None or new is None:
        return f"{retry_words(old)}{ARROW}{retry_words(new)}"
    before, after = _facts(old), _facts(new)
    parts = []
    for index in range(max(len(before), len(after))):
        was = before[index] if index < len(before) else "—"
        now = after[index] if index < len(after) else "—"
        if was != now:
            parts.append(_elide(was, now))
    return "; ".join(parts)


def _facts(policy: RetryPolicy) -> list[str]:
    """The diagram's label lines (without their commas) and the error classes it names."""
    facts = [line.rstrip(",") for line in retry_phrase(policy)]
    facts.append(
        f"never retries {', '.join(policy.non_retryable)}"
        if policy.non_retryable
        else "retries every error"
    )
    if policy.retry_on:
        facts.append(f"retries only {', '.join(policy.retry_on)}")
    return facts


def _elide(was: str, now: str) -> str:
    """``was → now`` with their common leading words said once: only words before the first
    number ("retries up to", "waiting"), so a list of waits is always given whole ("waiting
    2 s, 4 s → 2 s, 4 s, 8 s, 16 s", not "→ 4 s, 8 s, 16 s")."""
    old_words, new_words = was.split(" "), now.split(" ")
    common = 0
    while (
        common < min(len(old_words), len(new_words)) - 1
        and old_words[common] == new_words[common]
        and not any(c.isdigit() for c in old_words[common])
    ):
        common += 1
    if common == 0:
        return f"{was}{ARROW}{now}"
    return f"{' '.join(old_words)}{ARROW}{' '.join(new_words[common:])}"
