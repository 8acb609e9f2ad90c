"""Inspection: what an actor reports to ``create_actor(..., inspect=fn)``.

Event types follow XState's: ``@xstate.actor`` (started), ``@xstate.event`` (received),
``@xstate.microstep`` (transitions taken), ``@xstate.action`` (executed), ``@xstate.snapshot``
(changed) and ``@xstate.stopped``, plus ``@statecharts.dropped`` (an event sent after the
actor ended).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class InspectionEvent:
    """One inspection record. Fields not relevant to ``type`` are None."""

    type: str
    actor_id: str
    event: Any = None
    snapshot: Any = None
    transitions: tuple[tuple[str, tuple[str, ...]], ...] | None = None
    action: Any = None


Inspector = Callable[[InspectionEvent], None]


def logging_inspector(
    logger: logging.Logger | None = None, level: int = logging.DEBUG
) -> Inspector:
    """An inspector that writes each inspection event through ``logging``."""
    log = logger or logging.getLogger("statecharts.inspect")

    def inspect(record: InspectionEvent) -> None:
        if not log.isEnabledFor(level):
            return
        if record.type == "@xstate.event":
            log.log(level, "%s received %s", record.actor_id, record.event.get("type"))
        elif record.type == "@xstate.microstep":
            moves = "; ".join(
                f"{src} -> {','.join(dst) or '(no target)'}"
                for src, dst in record.transitions or ()
            )
            log.log(
                level,
                "%s microstep on %s: %s",
                record.actor_id,
                record.event.get("type") if record.event else None,
                moves,
            )
        elif record.type == "@xstate.action":
            log.log(level, "%s action %s", record.actor_id, getattr(record.action, "type", None))
        elif record.type == "@xstate.snapshot":
            log.log(
                level,
                "%s is now %s (%s)",
                record.actor_id,
                record.snapshot.value,
                record.snapshot.status,
            )
        else:
            log.log(level, "%s %s", record.actor_id, record.type.removeprefix("@xstate."))

    return inspect
