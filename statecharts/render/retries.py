"""Retry policies in words: "retries up to 3 times, waiting 1 s, 2 s, 4 s".

A policy is an invoke's ``retry``: the mapping form of the config (snake_case fields
``max_attempts``, ``initial_interval``, ``backoff``, ``coefficient``, ``max_interval``,
``jitter``, ``total_timeout``) or an object with the same attributes. ``max_attempts`` counts
every try, the first included, so 4 attempts are 1 try and up to 3 retries.

The waits are computed here from those fields (there is no shared retry module in the engine
yet): fixed = ``initial_interval`` each time, linear = ``initial_interval`` x n, exponential =
``initial_interval`` x ``coefficient`` ^ (n - 1), each capped at ``max_interval``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .labels import duration

_SHOWN_WAITS = 5  # longer lists end in "…" so the label stays one readable line


def _field(policy: Any, name: str, default: Any) -> Any:
    if isinstance(policy, Mapping):
        value = policy.get(name, default)
    else:
        value = getattr(policy, name, default)
    return default if value is None else value


def retry_waits(policy: Any, count: int) -> list[int]:
    """The first ``count`` waits (ms) between tries, before jitter."""
    initial = float(_field(policy, "initial_interval", 1000))
    backoff = _field(policy, "backoff", "exponential")
    coefficient = float(_field(policy, "coefficient", 2.0))
    cap = _field(policy, "max_interval", None)
    waits = []
    for n in range(1, count + 1):
        if backoff == "fixed":
            wait = initial
        elif backoff == "linear":
            wait = initial * n
        else:
            wait = initial * coefficient ** (n - 1)
        if cap is not None:
            wait = min(wait, float(cap))
        waits.append(round(wait))
    return waits


def retry_phrase(policy: Any) -> list[str]:
    """The retry loop's label, one line per fact: how often, how long between tries, and the
    overall time limit when there is one."""
    attempts = _field(policy, "max_attempts", 3)
    unlimited = not isinstance(attempts, int) or attempts <= 0
    retries = _SHOWN_WAITS if unlimited else attempts - 1
    if retries <= 0:
        return ["no retries"]
    computed = retry_waits(policy, min(retries, _SHOWN_WAITS))
    waits = [duration(w, short=True) for w in computed]
    random = _field(policy, "jitter", "none") == "full"
    if len(set(computed)) == 1:
        waits = [waits[0] if random else f"{waits[0]} between tries"]
    elif unlimited or retries > _SHOWN_WAITS:
        waits.append("…")
    how_often = "retries until it succeeds" if unlimited else \
        f"retries up to {retries} time{'s' if retries != 1 else ''}"
    lines = [f"{how_often},", f"waiting {'up to ' if random else ''}{', '.join(waits)}"
             + (" (random)" if random else "")]
    timeout = _field(policy, "total_timeout", None)
    if timeout is not None:
        lines.append(f"gives up after {duration(timeout)} in all")
    return lines


def final_failure_phrase(on_final_failure: str | None) -> str | None:
    """What happens when the last retry fails too, for ``onFinalFailure``."""
    if on_final_failure == "skip":
        return "if it still fails: skip this item"
    if on_final_failure == "fail_run":
        return "if it still fails: the run fails"
    return None
