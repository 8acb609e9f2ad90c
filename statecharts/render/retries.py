"""Retry policies in words: "retries up to 3 times, waiting 1 s, 2 s, 4 s".

The engine expands a retried invoke into ``attempting`` and ``waiting_to_retry`` states; the
diagram labels the loop between them with the policy (``retry_policy.RetryPolicy``, whose
``max_attempts`` counts every try, so 4 attempts are the first try and up to 3 retries).
"""

from __future__ import annotations

from ..retry_policy import RetryPolicy
from .labels import duration

_SHOWN_WAITS = 5  # longer lists end in "…" so the label stays short


def retry_phrase(policy: RetryPolicy) -> list[str]:
    """The retry loop's label, one line per fact: how often, how long between tries, and the
    overall time limit when there is one."""
    computed = policy.waits()
    retries = len(computed)
    if retries == 0:
        return ["no retries"]
    random = policy.jitter == "full"
    waits = [duration(w, short=True) for w in computed[:_SHOWN_WAITS]]
    if len(set(computed)) == 1:
        waits = [waits[0] if random else f"{waits[0]} between tries"]
    elif retries > _SHOWN_WAITS:
        waits.append("…")
    lines = [
        f"retries up to {retries} time{'s' if retries != 1 else ''},",
        f"waiting {'up to ' if random else ''}{', '.join(waits)}" + (" (random)" if random else ""),
    ]
    if policy.total_timeout is not None:
        lines.append(f"gives up after {duration(policy.total_timeout)} in all")
    return lines
