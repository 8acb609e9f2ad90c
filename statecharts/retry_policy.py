"""Retry policies: how long to wait between attempts of a call, and when to give up.

The policy alone, as arithmetic on attempts, errors and times: ``retrying`` expands a
machine's retried invoke into visible ``attempting`` / ``waiting_to_retry`` states that ask
this policy (their wait is a durable timer), and ``with_retry`` applies it to a plain call.
Durations are milliseconds. The random part of full jitter is derived from the call's key and
attempt, so the pure core stays deterministic.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .frozen import storable_text

BACKOFFS = ("fixed", "linear", "exponential")
JITTERS = ("none", "full")
T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """When and how often to retry a failing call.

    ``max_attempts`` counts every attempt, the first included. The wait before attempt ``n+1``
    is ``initial_interval`` (fixed), ``initial_interval * n`` (linear) or
    ``initial_interval * coefficient ** (n - 1)`` (exponential), capped at ``max_interval``,
    drawn uniformly from ``[0, wait]`` with ``jitter="full"``. An error's ``retry_after`` (ms)
    replaces the computed wait. Errors named in ``non_retryable`` are never retried; when
    ``retry_on`` is given, only errors named there are. ``total_timeout`` bounds the time from
    the first attempt to the start of the last one.
    """

    max_attempts: int = 3
    initial_interval: int = 1000
    backoff: str = "exponential"
    coefficient: float = 2.0
    max_interval: int | None = None
    jitter: str = "none"
    retry_on: tuple[str, ...] = field(default=())
    non_retryable: tuple[str, ...] = field(default=())
    total_timeout: int | None = None

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(problems))
        object.__setattr__(self, "retry_on", tuple(_names(self.retry_on)))
        object.__setattr__(self, "non_retryable", tuple(_names(self.non_retryable)))

    def problems(self) -> list[str]:
        """What is wrong with the fields, as ``field: message`` strings."""
        found = []
        if not _is_int(self.max_attempts) or self.max_attempts < 1:
            found.append(f"max_attempts: a whole number >= 1, not {self.max_attempts!r}")
        if not _is_number(self.initial_interval) or self.initial_interval < 0:
            found.append(f"initial_interval: milliseconds >= 0, not {self.initial_interval!r}")
        if self.backoff not in BACKOFFS:
            found.append(f"backoff: one of {', '.join(BACKOFFS)}, not {self.backoff!r}")
        if not _is_number(self.coefficient) or self.coefficient < 1:
            found.append(f"coefficient: a number >= 1, not {self.coefficient!r}")
        if self.max_interval is not None and (
            not _is_number(self.max_interval) or self.max_interval < 0
        ):
            found.append(f"max_interval: milliseconds >= 0, not {self.max_interval!r}")
        if self.jitter not in JITTERS:
            found.append(f"jitter: one of {', '.join(JITTERS)}, not {self.jitter!r}")
        if self.total_timeout is not None and (
            not _is_number(self.total_timeout) or self.total_timeout < 0
        ):
            found.append(f"total_timeout: milliseconds >= 0, not {self.total_timeout!r}")
        return found

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> RetryPolicy:
        """A policy from its JSON form (the field names above)."""
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(
                f"unknown retry fields {sorted(unknown)} (known: "
                f"{', '.join(cls.__dataclass_fields__)})"
            )
        values = dict(data)
        for key in ("retry_on", "non_retryable"):
            if key in values:
                values[key] = tuple(values[key])
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        """The policy as JSON types."""
        return {
            "max_attempts": self.max_attempts,
            "initial_interval": self.initial_interval,
            "backoff": self.backoff,
            "coefficient": self.coefficient,
            "max_interval": self.max_interval,
            "jitter": self.jitter,
            "retry_on": list(self.retry_on),
            "non_retryable": list(self.non_retryable),
            "total_timeout": self.total_timeout,
        }

    def base_wait(self, attempt: int) -> int:
        """The wait after failed attempt number ``attempt`` (1-based), before jitter."""
        initial = self.initial_interval
        if self.backoff == "fixed":
            wait: float = initial
        elif self.backoff == "linear":
            wait = initial * attempt
        else:
            wait = initial * self.coefficient ** (attempt - 1)
        if self.max_interval is not None:
            wait = min(wait, self.max_interval)
        return int(wait)

    def delay_for(self, attempt: int, error: Mapping[str, Any] | None = None, key: str = "") -> int:
        """The wait (ms) after failed attempt ``attempt``: ``retry_after`` if the error has
        one, else the backoff, with full jitter drawn deterministically from ``key``."""
        retry_after = error.get("retry_after") if isinstance(error, Mapping) else None
        if (
            isinstance(retry_after, int | float)
            and not isinstance(retry_after, bool)
            and retry_after >= 0
        ):
            return int(retry_after)
        wait = self.base_wait(attempt)
        if self.jitter == "full":
            return int(wait * _unit(f"{key}:{attempt}"))
        return wait

    def waits(self) -> list[int]:
        """The waits between attempts without jitter (for diagrams and docs)."""
        return [self.base_wait(n) for n in range(1, self.max_attempts)]

    def is_retryable(self, error: Mapping[str, Any] | None) -> bool:
        """False for errors named in ``non_retryable``, or not named in ``retry_on``."""
        names = set(error_names(error))
        if names & set(self.non_retryable):
            return False
        return not self.retry_on or bool(names & set(self.retry_on))

    def allows(
        self,
        attempt: int,
        error: Mapping[str, Any] | None,
        started_at: int,
        now: int,
        key: str = "",
    ) -> bool:
        """Whether a failure of attempt ``attempt`` is followed by another attempt."""
        if attempt >= self.max_attempts or not self.is_retryable(error):
            return False
        if self.total_timeout is not None:
            next_start = now + self.delay_for(attempt, error, key)
            return next_start - started_at <= self.total_timeout
        return True


def error_names(error: Mapping[str, Any] | None) -> list[str]:
    """The class names an error JSON carries (its ``name`` and its bases' ``types``).

    An error that is not a mapping (a child machine's failure final gives its reason as text)
    carries no names."""
    if not isinstance(error, Mapping) or not error:
        return []
    names = [str(error.get("name", ""))]
    names += [str(t) for t in error.get("types", ()) or ()]
    return names


def as_policy(value: Any) -> RetryPolicy:
    """A ``RetryPolicy`` from a policy or its mapping form."""
    if isinstance(value, RetryPolicy):
        return value
    if isinstance(value, Mapping):
        return RetryPolicy.from_mapping(value)
    raise TypeError(f"a retry policy is a RetryPolicy or a mapping, not {type(value).__name__}")


class RetriesExhausted(Exception):
    """``with_retry`` gave up; ``__cause__`` is the last error."""

    def __init__(self, attempts: int, last: BaseException) -> None:
        self.attempts = attempts
        self.last = last
        super().__init__(f"gave up after {attempts} attempt(s): {type(last).__name__}: {last}")


def with_retry(
    fn: Callable[[], T],
    policy: RetryPolicy | Mapping[str, Any],
    *,
    key: str = "",
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
) -> T:
    """Call ``fn()`` under ``policy`` outside any machine (same policy code as invokes).

    Raises the error itself when it is not retryable, ``RetriesExhausted`` when attempts run
    out. ``sleep`` takes seconds (inject a fake for tests).
    """
    rules = as_policy(policy)
    started = now()
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except Exception as exc:
            error = error_json(exc)
            if not rules.is_retryable(error):
                raise
            if not rules.allows(attempt, error, started, now(), key):
                raise RetriesExhausted(attempt, exc) from exc
            sleep(rules.delay_for(attempt, error, key) / 1000)


def error_json(error: BaseException) -> dict[str, Any]:
    """An exception as JSON: name, message, base class names, and ``retry_after`` (ms)."""
    data: dict[str, Any] = {
        "name": type(error).__name__,
        "message": storable_text(str(error)),
        "types": [c.__name__ for c in type(error).__mro__[1:] if c not in (object, BaseException)],
    }
    retry_after = getattr(error, "retry_after", None)
    if _is_number(retry_after):
        data["retry_after"] = retry_after
    return data


def _names(items: Sequence[Any]) -> list[str]:
    return [item if isinstance(item, str) else item.__name__ for item in items]


def _unit(seed: str) -> float:
    digest = hashlib.sha256(seed.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
