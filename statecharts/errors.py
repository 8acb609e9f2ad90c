"""The errors the engine raises. Each names the offending path, key or field."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class StatechartError(Exception):
    """Base class of every error the engine raises on purpose."""


class MissingImplementation(NamedTuple):
    """A name the config refers to that the code did not provide: ``kind`` is ``guard``,
    ``action``, ``actor`` or ``delay``; ``path`` is where the config names it."""

    kind: str
    name: str
    path: str


class MachineDefinitionError(StatechartError, ValueError):
    """A machine config is invalid. ``problems`` lists every problem as ``path: message``;
    ``missing`` holds those that are only an implementation the code did not provide."""

    def __init__(
        self, problems: Sequence[str], missing: Sequence[MissingImplementation] = ()
    ) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        self.missing: tuple[MissingImplementation, ...] = tuple(missing)
        count = len(self.problems)
        header = f"invalid machine definition ({count} problem{'s' if count != 1 else ''}):"
        super().__init__("\n  ".join([header, *self.problems]))


class SnapshotError(StatechartError, ValueError):
    """A persisted snapshot is corrupt, foreign or does not fit the machine.

    ``field`` names the offending field of the persisted data (e.g. ``machine`` or
    ``context.items[2]``).
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"snapshot field '{field}': {message}")


class SnapshotVersionError(SnapshotError):
    """A persisted snapshot was made by another version of the machine definition."""


class ContextError(StatechartError, TypeError):
    """A context value is not JSON-serializable; ``path`` names the key."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(f"context '{path}': {message}")


class EventError(StatechartError, ValueError):
    """An event is malformed (no ``type``, a reserved type, not JSON)."""


class ImplementationError(StatechartError):
    """A user guard, action, delay or actor raised; names the implementation and state."""

    def __init__(self, where: str, cause: BaseException) -> None:
        self.where = where
        self.cause = cause
        super().__init__(f"{where}: {type(cause).__name__}: {cause}")


class InfiniteLoopError(StatechartError, RuntimeError):
    """Eventless transitions or raised events kept the machine from settling."""


class ActorStoppedError(StatechartError, RuntimeError):
    """An event was sent to an actor that has stopped."""


class SystemIdTakenError(StatechartError, ValueError):
    """A ``systemId`` is already registered in the actor tree (XState: "Actor with system ID
    ... already exists"); names the holder and the actor that could not register it."""

    def __init__(self, system_id: str, holder: str, newcomer: str) -> None:
        self.system_id = system_id
        super().__init__(
            f"systemId {system_id!r} is already registered in this actor tree by "
            f"{holder}; {newcomer} cannot register it too"
        )


class CallTimeoutError(StatechartError, TimeoutError):
    """An attempt of an invoked call took longer than its invoke's ``timeout``: a failure like
    any other, which ``retry`` and ``onError`` match by this name (`CallTimeoutError`)."""
