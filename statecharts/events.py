"""Events: normalization, descriptors and the names of the engine's own events."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import EventError
from .frozen import FrozenDict, freeze

INIT = "xstate.init"
STOP = "xstate.stop"
WILDCARD = "*"

Event = FrozenDict
EventLike = str | Mapping[str, Any]

_string_events: dict[str, FrozenDict] = {}
interned_event = _string_events.get
"""The frozen ``{"type": name}`` that ``normalize_event(name)`` returned before, or None: a hot
path looks here first, one C call instead of a Python one."""


def normalize_event(event: EventLike) -> FrozenDict:
    """``"NAME"`` or ``{"type": "NAME", ...}`` -> a frozen event mapping with a ``type``."""
    if type(event) is str:
        cached = _string_events.get(event)
        if cached is None:
            if not event:
                raise EventError("an event type must be a non-empty string")
            if len(_string_events) < 10_000:
                cached = _string_events[event] = FrozenDict(type=event)
            else:
                cached = FrozenDict(type=event)
        return cached
    if isinstance(event, FrozenDict) and isinstance(event.get("type"), str):
        return event
    if isinstance(event, Mapping):
        kind = event.get("type")
        if not isinstance(kind, str) or not kind:
            raise EventError(f"event {dict(event)!r:.80} has no string 'type'")
        frozen: FrozenDict = freeze(event, "event", _event_error)
        return frozen
    if isinstance(event, str):
        return normalize_event(str(event))
    raise EventError(f"an event is a string or a mapping with 'type', not {type(event).__name__}")


def _event_error(path: str, message: str) -> EventError:
    return EventError(f"{path}: {message}")


def descriptor_matches(descriptor: str, event_type: str) -> bool:
    """XState event descriptors: exact, ``*``, or a ``prefix.*`` matching whole tokens."""
    if descriptor in (event_type, WILDCARD):
        return True
    if descriptor.endswith(".*"):
        prefix = descriptor[:-1]  # keeps the dot: "a.*" matches "a.b" but not "ab"
        return event_type.startswith(prefix) or event_type == descriptor[:-2]
    return False


def done_state_event_type(state_id: str) -> str:
    """The event a compound or parallel state raises when it completes."""
    return f"xstate.done.state.{state_id}"


def snapshot_actor_event_type(actor_id: str) -> str:
    """The event a parent receives each time a child machine's snapshot changes, when it
    asked for them (``onSnapshot`` on the invoke, ``spawn_child(..., sync_snapshot=True)``)."""
    return f"xstate.snapshot.{actor_id}"


def done_actor_event_type(actor_id: str) -> str:
    """The event a parent receives when an invoked or spawned actor completes."""
    return f"xstate.done.actor.{actor_id}"


def error_actor_event_type(actor_id: str) -> str:
    """The event a parent receives when an invoked or spawned actor fails."""
    return f"xstate.error.actor.{actor_id}"


def after_event_type(delay: int | str, state_id: str) -> str:
    """The event that a state's ``after`` timer raises."""
    return f"xstate.after.{delay}.{state_id}"


def is_error_actor_event(event: Mapping[str, Any]) -> bool:
    """True for ``xstate.error.actor.*`` events (unhandled ones put the machine in error)."""
    kind = event["type"]
    return isinstance(kind, str) and kind.startswith("xstate.error.actor.")
