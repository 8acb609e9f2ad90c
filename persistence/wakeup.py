"""`Wakeup`: the signal that work arrived for idle workers, instead of waiting for the next poll.

A worker thread that claimed nothing waits on its store's `Wakeup` (at most its poll interval,
which stays the fallback for timers coming due and leases running out). Every start of a run
that is due at once and every sent event count one wake-up: in this process at once (any store
object on the same database shares one `Wakeup`), and on PostgreSQL also in every other process
through `NOTIFY`, which the store's listener thread turns into the same signal
(`PostgresStore.wakeup`). A wake-up is a hint, never a hand-over: the woken thread claims as
always, so a lost or spurious one costs at most a poll interval or one empty claim.

A counter rather than an event: a waiter passes the count it saw *before* it claimed, so a
wake-up that arrives between its empty claim and its wait is not lost.
"""

from __future__ import annotations

import threading


class Wakeup:
    """A wake-up counter threads wait on (see the module docstring)."""

    def __init__(self) -> None:
        self._count = 0
        self._changed = threading.Condition(threading.Lock())

    def seen(self) -> int:
        """The number of wake-ups so far; pass it to `wait` after looking for work."""
        return self._count

    def notify(self) -> None:
        """Wake every thread waiting (work may have arrived)."""
        with self._changed:
            self._count += 1
            self._changed.notify_all()

    def wait(self, seen: int, timeout: float) -> bool:
        """Wait until a wake-up after `seen`, or `timeout` seconds; True if woken."""
        with self._changed:
            return self._changed.wait_for(lambda: self._count != seen, timeout)


_shared: dict[str, Wakeup] = {}
_shared_lock = threading.Lock()


def shared_wakeup(database: str) -> Wakeup:
    """The one `Wakeup` of `database` (a store URL) in this process."""
    with _shared_lock:
        return _shared.setdefault(database, Wakeup())
