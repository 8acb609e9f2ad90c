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

Waiters of a run (`persistence.waiting`) wait on its progress instead: on PostgreSQL a step
of a run someone `watch`es sends a NOTIFY of its own, which the listener turns into
`progressed(run_id)`; a listener that reconnected calls `progressed(None)` (anything may
have been missed), which wakes every waiter.

A sent event's wake-up names its run: one waiting thread is woken for it and takes the name
(`take_named`), to read and step that run by id without a claim (`persistence.worker`); a
wake-up that names no run (a start, a stop, a listener that reconnected) wakes every waiter,
who claim.
"""

from __future__ import annotations

import threading


class Wakeup:
    """A wake-up counter threads wait on (see the module docstring)."""

    def __init__(self) -> None:
        self._count = 0
        self._unnamed = 0
        self._named: dict[str, None] = {}  # run ids in the order they were named
        self._changed = threading.Condition(threading.Lock())
        self._progress: dict[str, int] = {}  # run id -> steps told, for runs waited on here
        self._followers: dict[str, int] = {}  # run id -> how many waiters here follow it
        self._progress_all = 0  # wake-ups of every waiter (a listener reconnected)
        self._progressed = threading.Condition(threading.Lock())
        self._subscribers: list[threading.Event] = []

    def subscribe(self, event: threading.Event) -> None:
        """Set `event` at every wake-up from now on (until `unsubscribe`): for a thread that
        waits on more than wake-ups (a call executor: also its calls' ends)."""
        with self._changed:
            self._subscribers.append(event)

    def unsubscribe(self, event: threading.Event) -> None:
        """Stop setting `event` (see `subscribe`)."""
        with self._changed:
            self._subscribers.remove(event)

    def seen(self) -> int:
        """The number of wake-ups so far; pass it to `wait` after looking for work."""
        return self._count

    def unnamed(self) -> int:
        """The number of wake-ups so far that named no run (work only a claim finds)."""
        return self._unnamed

    def notify(self, run_id: str | None = None) -> None:
        """Wake every thread waiting (work may have arrived), or, naming the run that has
        work, one of them."""
        with self._changed:
            self._count += 1
            if run_id is None:
                self._unnamed += 1
                self._changed.notify_all()
            else:
                self._named[run_id] = None
                self._changed.notify()
            for event in self._subscribers:
                event.set()

    def take_named(self) -> list[str]:
        """The runs named since the last call (each handed to one taker)."""
        with self._changed:
            named, self._named = list(self._named), {}
        return named

    def progressed(self, run_id: str | None) -> None:
        """A watched run committed a step (None: maybe any run did): wake its waiters."""
        with self._progressed:
            if run_id is None:
                self._progress_all += 1
            elif run_id in self._progress:  # (runs nobody here waits on are not kept)
                self._progress[run_id] += 1
            self._progressed.notify_all()

    def follow(self, run_id: str) -> None:
        """Start following `run_id`'s progress (until `unfollow`): its steps are counted."""
        with self._progressed:
            self._followers[run_id] = self._followers.get(run_id, 0) + 1
            self._progress.setdefault(run_id, 0)

    def unfollow(self, run_id: str) -> None:
        """Stop following `run_id`; its count is forgotten with its last follower here."""
        with self._progressed:
            left = self._followers.get(run_id, 1) - 1
            if left > 0:
                self._followers[run_id] = left
            else:
                self._followers.pop(run_id, None)
                self._progress.pop(run_id, None)

    def progress_mark(self, run_id: str) -> tuple[int, int]:
        """The mark of `run_id`'s progress now (see `follow`)."""
        with self._progressed:
            return self._progress.get(run_id, 0), self._progress_all

    def wait_progress(self, run_id: str, mark: tuple[int, int], timeout: float) -> bool:
        """Wait until `run_id` progressed past `mark`, or `timeout` seconds; True if it did."""
        with self._progressed:
            return self._progressed.wait_for(
                lambda: (self._progress.get(run_id, 0), self._progress_all) != mark, timeout
            )

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
