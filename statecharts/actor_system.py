"""The actors of one tree by ``systemId`` (XState's ``system``): how any actor of the tree
reaches another by name."""

from __future__ import annotations

from typing import Any

from .errors import SystemIdTakenError


class ActorSystem:
    """The actors of one tree, by ``systemId``: any actor of the tree reaches any of them by
    that name (XState's ``system.get``), and a name is held by one actor at a time."""

    def __init__(self) -> None:
        self.actors: dict[str, Any] = {}

    def get(self, system_id: str) -> Any:
        """The actor registered as ``system_id``, or None."""
        return self.actors.get(system_id)

    def register(self, system_id: str, actor: Any) -> None:
        """Register ``actor`` as ``system_id``; ``SystemIdTakenError`` naming both actors if
        another one holds it (as XState refuses a second actor with one system ID)."""
        holder = self.actors.get(system_id)
        if holder is not None and holder is not actor:
            raise SystemIdTakenError(system_id, f"actor {holder.id!r}", f"actor {actor.id!r}")
        self.actors[system_id] = actor

    def unregister(self, system_id: str | None, actor: Any) -> None:
        """Free ``system_id`` if ``actor`` holds it (it stopped)."""
        if system_id and self.actors.get(system_id) is actor:
            del self.actors[system_id]
