"""Effects: what a runtime must do after a transition, as plain immutable data.

The pure core (``Machine.transition``) never performs I/O or runs user actions; it returns these
records in execution order. A runtime executes them (the in-memory actor at once, a durable worker
after committing them in the same transaction as the new snapshot).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import msgspec


class Effect(msgspec.Struct, frozen=True):
    """Base class of every effect. ``kind`` names it in JSON records. Effects are frozen
    msgspec structs: the pure core makes several per event, and these build fastest."""

    kind: ClassVar[str] = "effect"

    def to_json(self) -> dict[str, Any]:
        """A JSON-able record of this effect (for outbox tables and logs)."""
        data: dict[str, Any] = {"kind": self.kind}
        for name in self.__struct_fields__:
            if name != "fn":
                data[name] = getattr(self, name)
        return data


class RunAction(Effect, frozen=True):
    """Run the user action ``type`` as ``fn(context, event, **params)``."""

    kind: ClassVar[str] = "action"
    type: str
    params: Any
    context: Any
    event: Any
    fn: Callable[..., Any] | None = None


class Emit(Effect, frozen=True):
    """Deliver ``event`` to the actor's listeners (``actor.on(type, fn)``)."""

    kind: ClassVar[str] = "emit"
    event: Any


class Log(Effect, frozen=True):
    """Write ``value`` to the log under ``label``."""

    kind: ClassVar[str] = "log"
    label: str | None
    value: Any


class StartTimer(Effect, frozen=True):
    """Deliver ``event`` after ``delay`` ms (due at epoch ms ``due_at``) to ``target``.

    ``target`` is None for the actor itself, else a child actor id or ``"#parent"``.
    """

    kind: ClassVar[str] = "start_timer"
    id: str
    event: Any
    delay: int
    due_at: int
    target: str | None = None


class CancelTimer(Effect, frozen=True):
    """Cancel the pending timer ``id``."""

    kind: ClassVar[str] = "cancel_timer"
    id: str


class StartChild(Effect, frozen=True):
    """Start the actor ``src`` as child ``id`` with ``input``.

    ``key`` is stable across the retries of one call site (``attempt`` counts them) so a
    runtime can hand it to the invoked function as its idempotency key.
    """

    kind: ClassVar[str] = "start_child"
    id: str
    src: str
    input: Any
    system_id: str | None = None
    invoked_by: str | None = None
    key: str | None = None
    attempt: int = 1
    logic: Any = None
    sync_snapshot: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "id": self.id,
            "src": self.src,
            "input": self.input,
            "system_id": self.system_id,
            "invoked_by": self.invoked_by,
            "key": self.key,
            "attempt": self.attempt,
        }


class StopChild(Effect, frozen=True):
    """Stop child actor ``id``."""

    kind: ClassVar[str] = "stop_child"
    id: str


class SendTo(Effect, frozen=True):
    """Send ``event`` to the actor ``target`` (a child id or a system id)."""

    kind: ClassVar[str] = "send_to"
    target: str
    event: Any


class SendParent(Effect, frozen=True):
    """Send ``event`` to the parent actor."""

    kind: ClassVar[str] = "send_parent"
    event: Any


NO_EFFECTS: tuple[Effect, ...] = ()
