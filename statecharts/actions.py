"""Actions: user actions (named, parameterized, inline) and the built-ins.

Built-ins are data with a ``resolve`` method that the pure core calls; they change the context
(``assign``), queue internal events (``raise_``) or add effects for a runtime (``emit``, ``log``,
``send_to``, ``spawn_child``, ...). User actions are never called by the pure core: they become
``RunAction`` effects carrying the context and event they must see.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .effects import Effect, Emit, Log, SendParent, SendTo
from .errors import ImplementationError
from .events import EventLike, normalize_event

Delay = int | float | str | Callable[..., Any]


class ActionScope(Protocol):
    """What a built-in action may read and change while the core resolves it."""

    context: Any
    event: Any

    def effect(self, effect: Effect) -> None: ...
    def raise_internal(self, event: Any) -> None: ...
    def schedule(self, timer_id: str, event: Any, delay: Any, target: str | None) -> None: ...
    def cancel(self, timer_id: str) -> None: ...
    def spawn(
        self,
        actor_id: str | None,
        src: Any,
        input: Any,
        system_id: str | None,
        *,
        sync_snapshot: bool = False,
    ) -> None: ...
    def stop_child(self, actor_id: str) -> None: ...
    def in_state(self, state: str) -> bool: ...
    def run_actions(self, actions: list[Any]) -> None: ...
    def check(self, guard: Any) -> bool: ...
    def assign(self, changes: Mapping[str, Any]) -> None: ...


class BuiltinAction:
    """Base of the built-in actions; ``type`` names them in effects and diagrams."""

    type: str = "builtin"

    def resolve(self, scope: ActionScope, params: Mapping[str, Any]) -> None:
        """Apply this action to ``scope``; pure: no I/O."""
        raise NotImplementedError

    def describe(self) -> str:
        """A short human description for diagrams."""
        return self.type


def _call(fn: Callable[..., Any], context: Any, event: Any, params: Mapping[str, Any]) -> Any:
    return fn(context, event, **params) if params else fn(context, event)


def _value(spec: Any, scope: ActionScope, params: Mapping[str, Any]) -> Any:
    return _call(spec, scope.context, scope.event, params) if callable(spec) else spec


@dataclass(frozen=True, eq=False)
class Assign(BuiltinAction):
    """Update the context: a mapping of key -> value or ``fn(context, event, **params)``,
    or one function returning a partial update."""

    assignment: Mapping[str, Any] | Callable[..., Any]
    type: str = "assign"

    def resolve(self, scope: ActionScope, params: Mapping[str, Any]) -> None:
        if callable(self.assignment):
            changes = _call(self.assignment, scope.context, scope.event, params)
            if not isinstance(changes, Mapping):
                raise TypeError(
                    f"an assign function must return a mapping, not {type(changes).__name__}"
                )
        else:
            changes = {key: _value(item, scope, params) for key, item in self.assignment.items()}
        scope.assign(changes)

    def describe(self) -> str:
        if callable(self.assignment):
            return "update " + getattr(self.assignment, "__name__", "context")
        return "set " + ", ".join(self.assignment)


@dataclass(frozen=True, eq=False)
class Raise(BuiltinAction):
    """Queue ``event`` on the machine's internal queue, or after ``delay`` ms as a timer."""

    event: EventLike | Callable[..., Any]
    delay: Delay | None = None
    id: str | None = None
    type: str = "raise"

    def resolve(self, scope: ActionScope, params: Mapping[str, Any]) -> None:
        event = normalize_event(_value(self.event, scope, params))
        if self.delay is None:
            scope.raise_internal(event)
        else:
            scope.schedule(self.id or event["type"], event, self.delay, None)

    def describe(self) -> str:
        name = self.event if isinstance(self.event, str) else getattr(self.event, "get", None)
        return f"raise {name if isinstance(name, str) else 'event'}"


@dataclass(frozen=True, eq=False)
class EmitAction(BuiltinAction):
    """Emit ``event`` to the actor's external listeners."""

    event: EventLike | Callable[..., Any]
    type: str = "emit"

    def resolve(self, scope: ActionScope, params: Mapping[str, Any]) -> None:
        scope.effect(Emit(normalize_event(_value(self.event, scope, params))))


@dataclass(frozen=True, eq=False)
class LogAction(BuiltinAction):
    """Log a value (or ``fn(context, event)``); by default the context and event."""

    value: Any = None
    label: str | None = None
    type: str = "log"

    def resolve(self, scope: ActionScope, params: Mapping[str, Any]) -> None:
        if self.value is None:
            value: Any = {"context": scope.context, "event": scope.event}
        else:
            value = _value(self.value, scope, params)
        scope.effect(Log(self.label, value))


@dataclass(frozen=True, eq=False)
class EnqueueActions(BuiltinAction):
    """Decide actions at run time: ``fn(context, event, enqueue, check, **params)``.

    ``enqueue(action)`` takes anything an ``entry`` list takes; ``check(guard)`` evaluates a
    guard against the current context.
    """

    fn: Callable[..., Any]
    type: str = "enqueueActions"

    def resolve(self, scope: ActionScope, params: Mapping[str, Any]) -> None:
        queued: list[Any] = []
        self.fn(scope.context, scope.event, queued.append, scope.check, **params)
        scope.run_actions(queued)


@dataclass(frozen=True, eq=False)
class SendToAction(BuiltinAction):
    """Send ``event`` to actor ``target`` (a child id, or ``fn(context, event)`` -> id)."""

    target: str | Callable[..., Any]
    event: EventLike | Callable[..., Any]
    delay: Delay | None = None
    id: str | None = None
    type: str = "sendTo"

    def resolve(self, scope: ActionScope, params: Mapping[str, Any]) -> None:
        target = _value(self.target, scope, params)
        event = normalize_event(_value(self.event, scope, params))
        if self.delay is None:
            scope.effect(SendTo(target, event))
        else:
            scope.schedule(self.id or event["type"], event, self.delay, target)

    def describe(self) -> str:
        return f"send to {self.target if isinstance(self.target, str) else 'actor'}"


@dataclass(frozen=True, eq=False)
class SendParentAction(BuiltinAction):
    """Send ``event`` to the parent actor."""

    event: EventLike | Callable[..., Any]
    delay: Delay | None = None
    id: str | None = None
    type: str = "sendParent"

    def resolve(self, scope: ActionScope, params: Mapping[str, Any]) -> None:
        event = normalize_event(_value(self.event, scope, params))
        if self.delay is None:
            scope.effect(SendParent(event))
        else:
            scope.schedule(self.id or event["type"], event, self.delay, "#parent")


@dataclass(frozen=True, eq=False)
class ForwardTo(BuiltinAction):
    """Send the current event on to actor ``target``."""

    target: str | Callable[..., Any]
    type: str = "forwardTo"

    def resolve(self, scope: ActionScope, params: Mapping[str, Any]) -> None:
        scope.effect(SendTo(_value(self.target, scope, params), scope.event))


@dataclass(frozen=True, eq=False)
class Cancel(BuiltinAction):
    """Cancel the delayed event or timer with ``id``."""

    id: str | Callable[..., Any]
    type: str = "cancel"

    def resolve(self, scope: ActionScope, params: Mapping[str, Any]) -> None:
        scope.cancel(_value(self.id, scope, params))


@dataclass(frozen=True, eq=False)
class SpawnChild(BuiltinAction):
    """Start actor ``src`` (a name from ``actors=``) as a child."""

    src: Any
    id: str | None = None
    input: Any = None
    system_id: str | None = None
    type: str = "spawnChild"
    sync_snapshot: bool = False

    def resolve(self, scope: ActionScope, params: Mapping[str, Any]) -> None:
        scope.spawn(
            self.id,
            self.src,
            _value(self.input, scope, params),
            self.system_id,
            sync_snapshot=self.sync_snapshot,
        )


@dataclass(frozen=True, eq=False)
class StopChild(BuiltinAction):
    """Stop the child actor ``id``."""

    id: str | Callable[..., Any]
    type: str = "stopChild"

    def resolve(self, scope: ActionScope, params: Mapping[str, Any]) -> None:
        scope.stop_child(_value(self.id, scope, params))


def assign(assignment: Mapping[str, Any] | Callable[..., Any]) -> Assign:
    """The only way to change context (see ``Assign``)."""
    return Assign(assignment)


def raise_(
    event: EventLike | Callable[..., Any], *, delay: Delay | None = None, id: str | None = None
) -> Raise:
    """Raise ``event`` internally, or after ``delay`` ms (``id`` lets ``cancel`` stop it)."""
    return Raise(event, delay, id)


def emit(event: EventLike | Callable[..., Any]) -> EmitAction:
    """Emit ``event`` to listeners outside the machine."""
    return EmitAction(event)


def log(value: Any = None, label: str | None = None) -> LogAction:
    """Log ``value`` (or ``fn(context, event)``)."""
    return LogAction(value, label)


def enqueue_actions(fn: Callable[..., Any]) -> EnqueueActions:
    """Choose actions at run time (see ``EnqueueActions``)."""
    return EnqueueActions(fn)


def send_to(
    target: str | Callable[..., Any],
    event: EventLike | Callable[..., Any],
    *,
    delay: Delay | None = None,
    id: str | None = None,
) -> SendToAction:
    """Send ``event`` to the actor ``target``."""
    return SendToAction(target, event, delay, id)


def send_parent(
    event: EventLike | Callable[..., Any], *, delay: Delay | None = None, id: str | None = None
) -> SendParentAction:
    """Send ``event`` to the parent actor."""
    return SendParentAction(event, delay, id)


def forward_to(target: str | Callable[..., Any]) -> ForwardTo:
    """Forward the current event to ``target``."""
    return ForwardTo(target)


def cancel(id: str | Callable[..., Any]) -> Cancel:
    """Cancel a delayed event or timer by id."""
    return Cancel(id)


def spawn_child(
    src: Any,
    *,
    id: str | None = None,
    input: Any = None,
    system_id: str | None = None,
    sync_snapshot: bool = False,
) -> SpawnChild:
    """Spawn the actor ``src`` as a child of this machine. With ``sync_snapshot=True`` (a
    child machine) the parent receives ``xstate.snapshot.<id>`` each time its snapshot
    changes, as XState's ``syncSnapshot``."""
    return SpawnChild(src, id, input, system_id, sync_snapshot=sync_snapshot)


def stop_child(id: str | Callable[..., Any]) -> StopChild:
    """Stop a child actor by id."""
    return StopChild(id)


@dataclass(frozen=True)
class ActionSpec:
    """An action as the definition holds it: its ``type`` name, ``params`` and implementation.

    ``impl`` is a ``BuiltinAction`` (resolved by the core) or a user callable (run by a runtime).
    """

    type: str
    params: Any = None
    impl: BuiltinAction | Callable[..., Any] | None = field(default=None, compare=False, repr=False)

    @property
    def is_builtin(self) -> bool:
        """True for actions the pure core resolves itself."""
        return isinstance(self.impl, BuiltinAction)


def call_user(where: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a user implementation, naming it in the error when it raises."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        raise ImplementationError(where, exc) from exc
