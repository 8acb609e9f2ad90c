"""Clocks: where an actor's time comes from. Times are epoch milliseconds.

``SystemClock`` uses the wall clock and one scheduler thread; ``SimulatedClock`` moves only when
told (``advance``), firing every timer that falls due at its own due instant, in due order, so
tests of time never sleep.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Protocol


class TimerHandle:
    """A scheduled callback; ``cancelled`` once cancelled or fired."""

    __slots__ = ("callback", "cancelled", "due_at", "seq")

    def __init__(self, due_at: int, seq: int, callback: Callable[[], None]) -> None:
        self.due_at = due_at
        self.seq = seq
        self.callback = callback
        self.cancelled = False

    def __lt__(self, other: TimerHandle) -> bool:
        return (self.due_at, self.seq) < (other.due_at, other.seq)


class Clock(Protocol):
    """What an actor needs from a clock."""

    def now(self) -> int:
        """The current time in epoch milliseconds."""
        ...

    def schedule(self, due_at: int, callback: Callable[[], None]) -> TimerHandle:
        """Call ``callback`` at ``due_at`` (at once, in order, if already due)."""
        ...

    def cancel(self, handle: TimerHandle) -> None:
        """Cancel a scheduled callback (no-op when it already fired)."""
        ...


class SimulatedClock:
    """A clock that moves only on ``advance(ms)`` or ``set(ms)``."""

    def __init__(self, start: int = 0) -> None:
        self._now = start
        self._heap: list[TimerHandle] = []
        self._seq = itertools.count()

    def now(self) -> int:
        """The simulated time."""
        return self._now

    def schedule(self, due_at: int, callback: Callable[[], None]) -> TimerHandle:
        """Queue ``callback``; it fires during the ``advance`` that reaches ``due_at``."""
        handle = TimerHandle(due_at, next(self._seq), callback)
        heapq.heappush(self._heap, handle)
        return handle

    def cancel(self, handle: TimerHandle) -> None:
        """Cancel ``handle``."""
        handle.cancelled = True

    def advance(self, ms: int) -> None:
        """Move time forward by ``ms``, firing each due timer at its own due instant (a timer
        scheduled while advancing fires too if it falls due within the interval)."""
        if ms < 0:
            raise ValueError("time only moves forward")
        self.set(self._now + ms)

    def set(self, moment: int) -> None:
        """Move time forward to ``moment`` (see ``advance``)."""
        if moment < self._now:
            raise ValueError("time only moves forward")
        while self._heap and self._heap[0].due_at <= moment:
            handle = heapq.heappop(self._heap)
            if handle.cancelled:
                continue
            self._now = max(self._now, handle.due_at)
            handle.cancelled = True
            handle.callback()
        self._now = moment

    def pending(self) -> int:
        """How many timers are still scheduled."""
        return sum(1 for h in self._heap if not h.cancelled)

    def next_due(self) -> int | None:
        """When the earliest scheduled timer falls due (None: no timer is scheduled)."""
        while self._heap and self._heap[0].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0].due_at if self._heap else None


class SystemClock:
    """The wall clock, with one daemon thread that fires scheduled callbacks."""

    def __init__(self) -> None:
        self._heap: list[TimerHandle] = []
        self._seq = itertools.count()
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None

    @staticmethod
    def now() -> int:
        """Epoch milliseconds. (Static: an actor hands ``clock.now`` to every step, and a
        static method is not bound anew each time.)"""
        return time.time_ns() // 1_000_000

    def schedule(self, due_at: int, callback: Callable[[], None]) -> TimerHandle:
        """Call ``callback`` on the clock's thread at ``due_at``."""
        handle = TimerHandle(due_at, next(self._seq), callback)
        with self._condition:
            heapq.heappush(self._heap, handle)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="statecharts-clock", daemon=True
                )
                self._thread.start()
            self._condition.notify()
        return handle

    def cancel(self, handle: TimerHandle) -> None:
        """Cancel ``handle``."""
        handle.cancelled = True

    def pending(self) -> int:
        """How many timers are still scheduled."""
        with self._condition:
            return sum(1 for h in self._heap if not h.cancelled)

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._heap or self._heap[0].due_at > self.now():
                    wait = None if not self._heap else (self._heap[0].due_at - self.now()) / 1000
                    self._condition.wait(wait)
                handle = heapq.heappop(self._heap)
            if not handle.cancelled:
                handle.cancelled = True
                handle.callback()
