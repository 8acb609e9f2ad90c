"""Transactions the database rolls back to resolve a conflict between writers, run again.

PostgreSQL ends a transaction it picks as a deadlock's victim (SQLSTATE 40P01) or one it cannot
serialize (40001): nothing of it was written, and the conflict is the database's, not the
caller's. The store runs such a transaction again from the start after a short jittered,
doubling backoff, at most `ATTEMPTS` times, each retry logged; the last failure is raised.

What is run again is always database work alone: a whole store call (`retried`, which every
store method that writes goes through) only while none of its transactions has committed yet
in this call (one that committed a transaction and then lost the next raises as before, since
running it again would write the first twice), or one transaction (`run_again`, the capacity
transactions). A store call runs no side effects outside the database: a step's effects ran
before its commit was asked for, and are never run again by a retry of the commit.

SQLite has no such conflicts: its writers take the database's write lock one at a time
(`BEGIN IMMEDIATE`), each waiting up to its busy timeout (30 s) for it; a writer still locked
out then gets `StoreUnavailableError`, which workers back off from as from an outage.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from persistence.stores.errors import StoreError

ATTEMPTS = 6
"""How many times a store call or transaction is run when the database rolls it back as a
deadlock victim or a serialization failure (the last failure is raised)."""
BACKOFF_MS = 10
"""The first retry's backoff; doubled per attempt, jittered by +-50% (so two transactions that
met once do not meet again in step)."""
ROLLED_BACK = frozenset({"40P01", "40001"})
"""SQLSTATEs of a transaction the server rolled back to resolve a conflict: deadlock detected,
serialization failure. Safe to run again from the start: nothing of it was written."""

log = logging.getLogger("statecharts.store")
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

_ended = threading.local()


def ended() -> int:
    """How many database transactions (or autocommitted statements) this thread has ended
    without an error: a store call's retry checks that none ended during its attempt."""
    return getattr(_ended, "count", 0)  # type: ignore[no-any-return]


def count_ended() -> None:
    """Count one transaction ended here without an error (the dialects call it)."""
    _ended.count = ended() + 1


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of the driver error behind a store error (psycopg errors carry one)."""
    seen: BaseException | None = exc
    while seen is not None:
        state = getattr(seen, "sqlstate", None)
        if isinstance(state, str):
            return state
        seen = seen.__cause__ or seen.__context__
    return None


def run_again(work: Callable[[], T], what: str) -> T:
    """`work()` (database work alone), run again while the database rolls it back to resolve
    a conflict (`ROLLED_BACK`) and nothing of it has committed: see the module docstring."""
    for attempt in range(1, ATTEMPTS + 1):
        before = ended()
        try:
            return work()
        except StoreError as exc:
            state = sqlstate(exc)
            if state not in ROLLED_BACK or attempt == ATTEMPTS or ended() != before:
                raise
            wait_ms = BACKOFF_MS * 2 ** (attempt - 1) * random.uniform(0.5, 1.5)
            log.warning(
                "%s was rolled back by the database (SQLSTATE %s: %s); run again in "
                "%.0f ms (attempt %d of %d)",
                what,
                state,
                str(exc).splitlines()[0],
                wait_ms,
                attempt + 1,
                ATTEMPTS,
            )
            time.sleep(wait_ms / 1000)
    raise AssertionError("unreachable")  # (the last attempt returns or raises)


def retried(method: F) -> F:
    """A store method that writes, run again as `run_again` says."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return run_again(lambda: method(self, *args, **kwargs), f"a store call ({method.__name__})")

    return call  # type: ignore[return-value]
