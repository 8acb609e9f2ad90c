"""Import a python-statemachine (3.2.2) ``StateChart`` class into this engine.

``from_python_statemachine(cls)`` reads the class's states (compound, parallel, final,
history), transitions (events, eventless, internal/external, ``cond``/``unless`` names) and
callbacks, and returns an ``ImportedMachine``: an XState-style ``config`` plus ``callbacks``, a
table of every python-statemachine callback by name, what it became (a guard or an action)
and where it is used. ``imported.create_machine(bind=obj)`` builds the machine with each
callback name implemented by ``obj``'s method of that name, so python-statemachine users get
persistence, diagrams and this test kit without rewriting their machine.

Semantics that differ (python-statemachine follows SCXML): see docs/testing.md. In short,
external transitions to the source or its descendants become ``reenter: true``; transition
``before`` callbacks run, like ``on`` and ``after`` ones, as transition actions (after the
exits, not before them); validators are listed but not imported.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..guards import and_, not_
from ..machine import Machine, create_machine

ROLE_GUARD = ("cond", "unless")
ROLE_ACTION = ("before", "on", "after", "enter", "exit")


@dataclass(frozen=True)
class CallbackUse:
    """One row of the callback table."""

    name: str  # the python-statemachine callback (method) name or expression
    role: str  # cond | unless | before | on | after | enter | exit | validator
    kind: str  # guard | action | not imported
    where: str  # config path where it is used


@dataclass
class ImportedMachine:
    """A python-statemachine class as this engine's config, and its callback table."""

    config: dict[str, Any]
    callbacks: list[CallbackUse] = field(default_factory=list)

    @property
    def guard_names(self) -> list[str]:
        """Callback names used as guards."""
        return sorted({c.name for c in self.callbacks if c.kind == "guard"})

    @property
    def action_names(self) -> list[str]:
        """Callback names used as actions."""
        return sorted({c.name for c in self.callbacks if c.kind == "action"})

    def table(self) -> str:
        """The callback table as aligned text."""
        rows = [("callback", "role", "becomes", "used at")] + [
            (c.name, c.role, c.kind, c.where) for c in self.callbacks
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows)

    def create_machine(
        self,
        *,
        bind: object | None = None,
        guards: Mapping[str, Any] | None = None,
        actions: Mapping[str, Any] | None = None,
    ) -> Machine:
        """Build the machine. ``bind``: an object whose methods implement the callbacks by
        name (called with the keyword arguments they ask for among ``context``, ``event``,
        ``event_data`` and the event's payload fields). ``guards`` / ``actions`` override by
        name. Missing implementations raise ``MachineDefinitionError`` naming them."""
        guard_impls: dict[str, Any] = {}
        action_impls: dict[str, Any] = {}
        if bind is not None:
            for name in self.guard_names:
                if hasattr(bind, name):
                    guard_impls[name] = _adapter(getattr(bind, name))
            for name in self.action_names:
                if hasattr(bind, name):
                    action_impls[name] = _adapter(getattr(bind, name))
        guard_impls.update(guards or {})
        action_impls.update(actions or {})
        return create_machine(self.config, guards=guard_impls, actions=action_impls)


def _adapter(method: Callable[..., Any]) -> Callable[..., Any]:
    """Call a python-statemachine style callback with the arguments it names."""
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):  # builtins without a signature
        parameters = {}  # type: ignore[assignment]
    takes_all = any(p.kind is p.VAR_KEYWORD for p in parameters.values())

    def call(context: Any, event: Any, **params: Any) -> Any:
        available = {
            **{k: v for k, v in event.items() if k != "type"},
            "context": context,
            "event": event["type"],
            "event_data": event,
            **params,
        }
        kwargs = available if takes_all else {k: v for k, v in available.items() if k in parameters}
        return method(**kwargs)

    call.__name__ = getattr(method, "__name__", "callback")
    return call


def from_python_statemachine(
    cls: type[Any], machine_id: str | None = None, context: Mapping[str, Any] | None = None
) -> ImportedMachine:
    """Import ``cls`` (a python-statemachine ``StateChart`` subclass); see module docs.
    python-statemachine keeps data on its model, so give the engine's initial ``context``
    (JSON values) here when the callbacks need one."""
    states = list(getattr(cls, "states", []) or [])
    if not states:
        raise ValueError(
            f"{getattr(cls, '__name__', cls)!r} is not a python-statemachine class with states"
        )
    mid = machine_id or cls.__name__
    importer = _Importer(mid, cls)
    config: dict[str, Any] = {"id": mid}
    if context is not None:
        config["context"] = dict(context)
    importer.fill_children(config, states, None, "")
    return ImportedMachine(config, importer.callbacks)


class _Importer:
    def __init__(self, machine_id: str, cls: type[Any]) -> None:
        self.machine_id = machine_id
        self.cls = cls
        self.callbacks: list[CallbackUse] = []

    def ref(self, state: Any) -> str:
        keys = []
        node = state
        while node is not None:
            keys.append(node.id)
            node = node.parent
        return "#" + ".".join([self.machine_id, *reversed(keys)])

    def fill_children(
        self, config: dict[str, Any], children: list[Any], parent: Any, path: str
    ) -> None:
        parallel = parent is not None and parent.parallel
        states: dict[str, Any] = {}
        for child in children:
            states[child.id] = self.state(child, _join(path, f"states.{child.id}"))
        for history in parent.history if parent is not None else []:
            states[history.id] = self.history(history)
        config["states"] = states
        if not parallel:
            initial = next((c for c in children if c.initial), children[0])
            config["initial"] = initial.id

    def state(self, state: Any, path: str) -> dict[str, Any]:
        config: dict[str, Any] = {}
        if state.final:
            config["type"] = "final"
        elif state.parallel:
            config["type"] = "parallel"
        if state.states:
            self.fill_children(config, list(state.states), state, path)
        for role, key in (("enter", "entry"), ("exit", "exit")):
            names = self.names(
                getattr(state, role),
                role,
                _join(path, key),
                (f"on_{role}_state", f"on_{role}_{state.id}"),
            )
            if names:
                config[key] = names
        self.transitions(config, state, path)
        return config

    def history(self, history: Any) -> dict[str, Any]:
        config: dict[str, Any] = {"type": "history", "history": history.type.value}
        defaults = [t for t in history.transitions.transitions if t.targets]
        if defaults:
            config["target"] = (
                [t.id for t in defaults[0].targets]
                if len(defaults[0].targets) > 1
                else defaults[0].targets[0].id
            )
        return config

    def transitions(self, config: dict[str, Any], state: Any, path: str) -> None:
        for transition in state.transitions.transitions:
            if transition.initial:
                continue
            events = [str(e) for e in transition.events]
            dotted = {e for e in events if "." in e}
            events = [e for e in events if e.replace("_", ".") not in dotted or e in dotted]
            if not events:
                items = config.setdefault("always", [])
                items.append(
                    self.transition(
                        transition, state, f"{_join(path, 'always')}[{len(items)}]", None
                    )
                )
                continue
            for event in events:
                if event == f"done.state.{state.id}":
                    items = config.setdefault("onDone", [])
                    where = f"{_join(path, 'onDone')}[{len(items)}]"
                else:
                    items = config.setdefault("on", {}).setdefault(event, [])
                    where = f"{_join(path, f'on.{event}')}[{len(items)}]"
                items.append(self.transition(transition, state, where, event))

    def transition(
        self, transition: Any, state: Any, where: str, event: str | None
    ) -> dict[str, Any]:
        result: dict[str, Any] = {}
        targets = list(transition.targets)
        if targets:
            refs = [self.ref(t) for t in targets]
            result["target"] = refs[0] if len(refs) == 1 else refs
            inside = all(t is state or t.is_descendant(state) for t in targets)
            if inside and not transition.internal:
                result["reenter"] = True  # SCXML external: the source is exited and entered
        guard = self.guard(transition, _join(where, "guard"))
        if guard is not None:
            result["guard"] = guard
        actions: list[str] = []
        for role in ("before", "on", "after"):
            conventions = (f"{role}_transition", *((f"{role}_{event}",) if event else ()))
            actions += self.names(
                getattr(transition, role), role, _join(where, "actions"), conventions
            )
        if actions:
            result["actions"] = actions
        for spec in transition.validators:
            if not spec.is_convention:
                self.callbacks.append(
                    CallbackUse(str(spec.attr_name), "validator", "not imported", where)
                )
        return result

    def guard(self, transition: Any, where: str) -> Any:
        parts: list[Any] = []
        for spec in transition.cond:
            if spec.is_convention:
                continue
            name = str(spec.attr_name)
            role = "unless" if spec.expected_value is False else "cond"
            self.callbacks.append(CallbackUse(name, role, "guard", where))
            parts.append(not_(name) if role == "unless" else name)
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else and_(*parts)

    def names(
        self, specs: Any, role: str, where: str, conventions: tuple[str, ...] = ()
    ) -> list[str]:
        """Explicit callbacks, then the naming-convention ones (``on_enter_<state>``,
        ``before_<event>``, ...) that the class defines, in python-statemachine's order."""
        found = []
        for spec in specs:
            if spec.is_convention or not isinstance(spec.attr_name, str) or not spec.attr_name:
                continue
            self.callbacks.append(CallbackUse(spec.attr_name, role, "action", where))
            found.append(spec.attr_name)
        for name in conventions:
            if callable(getattr(self.cls, name, None)):
                self.callbacks.append(CallbackUse(name, f"{role} (by name)", "action", where))
                found.append(name)
        return found


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


__all__ = ["CallbackUse", "ImportedMachine", "from_python_statemachine"]
