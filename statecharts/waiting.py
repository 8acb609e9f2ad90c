"""``wait_for``: block until an in-memory actor's snapshot meets a condition (on a simulated
clock, by moving time from timer to timer instead)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from .clock import Clock, SimulatedClock
from .errors import ActorStoppedError
from .snapshot import Snapshot


class Watched(Protocol):
    """What ``wait_for`` needs of an actor (``actor.Actor`` has it)."""

    id: str
    clock: Clock

    @property
    def status(self) -> str: ...

    def get_snapshot(self) -> Snapshot: ...

    def subscribe(
        self,
        observer: Callable[[Snapshot], Any] | None = None,
        *,
        error: Callable[[BaseException], Any] | None = None,
        complete: Callable[[], Any] | None = None,
    ) -> Any: ...


def wait_for(
    actor: Watched, predicate: Callable[[Snapshot], bool], timeout: int | None = None
) -> Snapshot:
    """Wait until ``predicate(snapshot)`` holds; ``timeout`` in ms.

    With a ``SimulatedClock`` this advances simulated time timer by timer (never sleeping);
    with the system clock it blocks the calling thread. Raises ``TimeoutError``, or
    ``ActorStoppedError`` if the actor ends first without the predicate holding.
    """
    snapshot = actor.get_snapshot()
    if predicate(snapshot):
        return snapshot
    if isinstance(actor.clock, SimulatedClock):
        return _wait_simulated(actor, actor.clock, predicate, timeout)
    done = threading.Event()
    found: list[Snapshot] = []

    def check(snap: Snapshot) -> None:
        if predicate(snap):
            found.append(snap)
            done.set()

    subscription = actor.subscribe(check, complete=done.set)
    try:
        check(actor.get_snapshot())
        if not done.wait(None if timeout is None else timeout / 1000):
            raise TimeoutError(f"actor {actor.id!r}: condition not met within {timeout} ms")
    finally:
        subscription.unsubscribe()
    if found:
        return found[0]
    raise ActorStoppedError(f"actor {actor.id!r} stopped before the condition held")


def _wait_simulated(
    actor: Watched,
    clock: SimulatedClock,
    predicate: Callable[[Snapshot], bool],
    timeout: int | None,
) -> Snapshot:
    deadline = None if timeout is None else clock.now() + timeout
    while True:
        snapshot = actor.get_snapshot()
        if predicate(snapshot):
            return snapshot
        if actor.status == "stopped":
            raise ActorStoppedError(f"actor {actor.id!r} stopped before the condition held")
        next_due = min((h.due_at for h in clock._heap if not h.cancelled), default=None)
        if next_due is None or (deadline is not None and next_due > deadline):
            if deadline is not None:
                clock.set(max(deadline, clock.now()))
                if predicate(actor.get_snapshot()):
                    return actor.get_snapshot()
            raise TimeoutError(
                f"actor {actor.id!r}: condition not met within {timeout} ms of simulated time"
            )
        clock.set(max(next_due, clock.now()))
