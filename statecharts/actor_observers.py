"""Who watches an in-memory actor: subscribers to its snapshots (``subscribe``), listeners to
the events its machine emits (``on``), and the inspector that gets every event, microstep,
action and snapshot (``_report``, ``_trace``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .inspection import InspectionEvent, Inspector
from .snapshot import Snapshot

Observer = tuple[Callable[..., Any] | None, Callable[..., Any] | None, Callable[..., Any] | None]
"""What ``subscribe`` keeps: ``(observer, error, complete)``."""


class Subscription:
    """Returned by ``subscribe``; ``unsubscribe()`` stops the notifications."""

    def __init__(self, observers: list[Any], observer: Any) -> None:
        self._observers = observers
        self._observer = observer

    def unsubscribe(self) -> None:
        """Stop notifying this observer."""
        if self._observer in self._observers:
            self._observers.remove(self._observer)


class ActorObservers:
    """The observing half of ``Actor`` (see ``actor.Actor``, which sets these attributes)."""

    id: str
    _snapshot: Snapshot | None
    _inspect: Inspector | None
    _observers: list[Observer]
    _listeners: dict[str, list[Callable[[Any], None]]]

    def subscribe(
        self,
        observer: Callable[[Snapshot], Any] | None = None,
        *,
        error: Callable[[BaseException], Any] | None = None,
        complete: Callable[[], Any] | None = None,
    ) -> Subscription:
        """Call ``observer(snapshot)`` on each change, ``error(exc)`` on failure and
        ``complete()`` when the actor stops."""
        entry = (observer, error, complete)
        self._observers.append(entry)
        return Subscription(self._observers, entry)

    def on(self, event_type: str, listener: Callable[[Any], None]) -> Subscription:
        """Listen to events the machine ``emit``s (``*`` for all)."""
        listeners = self._listeners.setdefault(event_type, [])
        listeners.append(listener)
        return Subscription(listeners, listener)

    def _notify(self) -> None:
        snapshot = self._snapshot
        for observer, _, _ in list(self._observers):
            if observer is not None:
                observer(snapshot)

    def _report(self, kind: str, **fields: Any) -> None:
        if self._inspect is not None:
            self._inspect(InspectionEvent(kind, self.id, **fields))

    def _trace(self, trace: list[Any] | None) -> None:
        if trace and self._inspect is not None:
            for event, transitions in trace:
                self._report(
                    "@xstate.microstep",
                    event=event,
                    transitions=tuple(
                        (t.source.id, tuple(n.id for n in t.targets)) for t in transitions
                    ),
                )
