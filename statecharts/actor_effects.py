"""What an in-memory actor does with the effects a step returns: user actions called in
order, timers armed on its clock, children started and stopped, sends, emits and logs."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from . import effects as fx
from .actor_system import ActorSystem
from .clock import Clock, TimerHandle
from .effects import RunAction
from .errors import ImplementationError
from .frozen import FrozenDict, thaw
from .inspection import Inspector
from .machine import Machine

logger = logging.getLogger("statecharts")


class ActorEffects:
    """The effect-running half of ``Actor`` (see ``actor.Actor``, which sets these attributes
    and provides the methods declared here)."""

    id: str
    machine: Machine
    clock: Clock
    system: ActorSystem
    parent: Any
    _inspect: Inspector | None
    _timers: dict[str, TimerHandle]
    _children: dict[str, Any]
    _held: dict[str, list[FrozenDict]]
    _listeners: dict[str, list[Callable[[Any], None]]]
    _report: Callable[..., None]
    _deliver: Callable[[str, Any], None]
    _start_child: Callable[..., None]
    _stop_child: Callable[[Any], None]
    _wants_snapshots: Callable[[str | None, str], bool]

    def _run_effects(self, effects: tuple[fx.Effect, ...]) -> None:
        inspect = self._inspect
        for effect in effects:  # (no ``enumerate``: only a held send needs its place)
            if inspect is not None:
                self._report("@xstate.action", action=effect)
            if type(effect) is RunAction:  # the commonest effect, run without a dispatch
                fn: Any = effect.fn  # callable: the definition checked it
                if fn is None:  # an action looked up by name (not built by this machine)
                    fn = self.machine.implementations.actions.get(effect.type)
                    if not callable(fn):
                        continue
                try:
                    if effect.params:
                        fn(effect.context, effect.event, **effect.params)
                    else:
                        fn(effect.context, effect.event)
                except Exception as exc:
                    raise ImplementationError(f"action '{effect.type}'", exc) from exc
                continue
            if isinstance(effect, fx.SendTo) and self._hold(effect, effects):
                continue
            self._run_effect(effect)
            if self._held and isinstance(effect, fx.StartChild):
                for name in (effect.id, effect.system_id):
                    for event in self._held.pop(name or "", ()):
                        self._send_to(effect.id, event)

    def _hold(self, send: fx.SendTo, effects: tuple[fx.Effect, ...]) -> bool:
        """Hold a send to a child this step starts later (an entry action sending to the
        state's own invocation): XState delivers it once the child has started."""
        target = send.target
        if target in self._children or self.system.get(target) is not None:
            return False
        index = next(i for i, e in enumerate(effects) if e is send)  # not ``==``: alike sends
        if not any(
            isinstance(e, fx.StartChild) and target in (e.id, e.system_id)
            for e in effects[index + 1 :]
        ):
            return False
        self._held.setdefault(target, []).append(send.event)
        return True

    def _run_effect(self, effect: fx.Effect) -> None:
        """Any effect but ``RunAction`` (which ``_run_effects`` runs itself)."""
        if isinstance(effect, fx.StartTimer):
            self._arm(effect.id, effect.due_at)
        elif isinstance(effect, fx.CancelTimer):
            handle = self._timers.pop(effect.id, None)
            if handle is not None:
                self.clock.cancel(handle)
        elif isinstance(effect, fx.StartChild):
            self._start_child(
                effect.id,
                effect.src,
                effect.logic,
                effect.input,
                effect.system_id,
                None,
                effect.key,
                effect.sync_snapshot or self._wants_snapshots(effect.invoked_by, effect.id),
            )
        elif isinstance(effect, fx.StopChild):
            child = self._children.pop(effect.id, None)
            if child is not None:
                self._stop_child(child)
        elif isinstance(effect, fx.SendTo):
            self._send_to(effect.target, effect.event)
        elif isinstance(effect, fx.SendParent):
            if self.parent is None:
                logger.warning(
                    "actor %r has no parent to send %r to", self.id, effect.event["type"]
                )
            else:
                self.parent._deliver("event", effect.event)
        elif isinstance(effect, fx.Emit):
            for listener in (
                *self._listeners.get(effect.event["type"], ()),
                *self._listeners.get("*", ()),
            ):
                listener(effect.event)
        elif isinstance(effect, fx.Log):
            logger.info("%s%s", f"{effect.label}: " if effect.label else "", thaw(effect.value))

    def _arm(self, timer_id: str, due_at: int) -> None:
        old = self._timers.pop(timer_id, None)
        if old is not None:
            self.clock.cancel(old)
        self._timers[timer_id] = self.clock.schedule(
            due_at, lambda: self._deliver("timer", timer_id)
        )

    def _send_to(self, target: str, event: FrozenDict) -> None:
        actor = self._children.get(target) or self.system.get(target)
        if actor is None:
            logger.warning(
                "actor %r: no child or system actor %r to send %r to (dropped)",
                self.id,
                target,
                event["type"],
            )
            return
        deliver = getattr(actor, "_deliver", None)  # an actor's mailbox (a callback has none)
        deliver("event", event) if deliver is not None else actor.send(event)
