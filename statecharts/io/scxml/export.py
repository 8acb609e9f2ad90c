"""``to_scxml``: a machine whose guards and actions are named, written as an SCXML document.

Loading the document back with ``load_scxml(text, guards=..., actions=...)`` (the same
implementations) gives a machine that behaves the same: the same state ids and values, the
same transitions in the same priority, the same named actions called with the same params.

What maps: states, parallel, final and history states (with their default target), ``on``
transitions (XState's priority order: exact event types, then ``prefix.*`` longest first, then
``*``), ``onDone``, ``always``, ``reenter``, entry/exit, a mapping ``context`` as
``<datamodel>``, named guards (``cond="name(param=...)"``), ``and``/``or``/``not``/``stateIn``,
named actions (``<sc:action type="name">``), and the built-ins ``raise_`` (a fixed event),
``log`` and ``assign`` with fixed values. Anything else (inline functions, ``after``,
``invoke``, outputs) raises ``ValueError`` naming the state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from xml.sax.saxutils import quoteattr

from ...actions import ActionSpec, Assign, LogAction, Raise
from ...frozen import thaw
from ...guards import GuardSpec
from ...machine import Machine
from ...nodes import FINAL, HISTORY, PARALLEL, StateNode, Transition
from .document import SCXML_NS, STATECHARTS_NS

_DONE_STATE = "xstate.done.state."


def to_scxml(machine: Machine) -> str:
    """The SCXML document for ``machine`` (see the module docstring for what maps)."""
    return _Writer(machine).document()


class _Writer:
    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.lines: list[str] = []

    def document(self) -> str:
        root = self.machine.root
        initial = f" initial={quoteattr(root.initial.id)}" if root.initial else ""
        self.lines.append(
            f'<scxml xmlns="{SCXML_NS}" xmlns:sc="{STATECHARTS_NS}" '
            f'version="1.0" datamodel="python" '
            f"name={quoteattr(self.machine.id)}{initial}>"
        )
        self._datamodel(self.machine.definition.context)
        self._actions_of(root)
        if root.transitions or root.always or root.entry or root.exit:
            raise self._unsupported(
                root,
                "transitions or actions on the root (SCXML's "
                "<scxml> has none; wrap the states in one)",
            )
        for child in root.children:
            self._state(child, 1)
        self.lines.append("</scxml>")
        return "\n".join(self.lines) + "\n"

    def _emit(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text)

    def _unsupported(self, node: StateNode, what: str) -> ValueError:
        return ValueError(
            f"to_scxml: state {node.id!r}: {what} cannot be written as SCXML "
            "(only named guards and actions, fixed raise/log/assign)"
        )

    def _datamodel(self, context: Any) -> None:
        if context is None:
            return
        if not isinstance(context, Mapping):
            raise ValueError(
                "to_scxml: a context computed by a function cannot be written "
                "as SCXML; give a mapping"
            )
        self._emit(1, "<datamodel>")
        for key, value in context.items():
            self._emit(2, f"<data id={quoteattr(key)} expr={quoteattr(repr(thaw(value)))}/>")
        self._emit(1, "</datamodel>")

    def _actions_of(self, node: StateNode) -> None:
        if node.invoke:
            raise self._unsupported(node, "invoke")
        if node.after_timers:
            raise self._unsupported(node, "'after'")
        if node.output is not None:
            raise self._unsupported(node, "output")

    def _state(self, node: StateNode, depth: int) -> None:
        self._actions_of(node)
        if node.type == HISTORY:
            self._history(node, depth)
            return
        tag = {PARALLEL: "parallel", FINAL: "final"}.get(node.type, "state")
        initial = f" initial={quoteattr(node.initial.id)}" if node.initial else ""
        self._emit(depth, f"<{tag} id={quoteattr(node.id)}{initial}>")
        self._block(node, "onentry", node.entry, depth + 1)
        self._block(node, "onexit", node.exit, depth + 1)
        for transition in _priority_order(node):
            self._transition(node, transition, depth + 1)
        for child in node.children:
            self._state(child, depth + 1)
        self._emit(depth, f"</{tag}>")

    def _history(self, node: StateNode, depth: int) -> None:
        self._emit(depth, f"<history id={quoteattr(node.id)} type={quoteattr(str(node.history))}>")
        if node.history_default:
            targets = " ".join(t.id for t in node.history_default)
            self._emit(depth + 1, f"<transition target={quoteattr(targets)}/>")
        self._emit(depth, "</history>")

    def _block(
        self, node: StateNode, tag: str, actions: tuple[ActionSpec, ...], depth: int
    ) -> None:
        if actions:
            self._emit(depth, f"<{tag}>")
            for action in actions:
                self._action(node, action, depth + 1)
            self._emit(depth, f"</{tag}>")

    def _transition(self, node: StateNode, transition: Transition, depth: int) -> None:
        attrs = ""
        conditions = []
        if transition.event is not None:
            event = transition.event
            if event.startswith(_DONE_STATE):
                event = event[len("xstate.") :]  # SCXML names it done.state.<id>
                # ids are dotted: the descriptor alone would also match done.state.<id>.<child>
                conditions.append(f"_event.name == {event!r}")
            elif event.startswith("xstate."):
                raise self._unsupported(node, f"the event {event!r}")
            attrs += f" event={quoteattr(event)}"
        if transition.guard is not None:
            conditions.append(self._guard(node, transition.guard))
        if conditions:
            cond = (
                conditions[0]
                if len(conditions) == 1
                else " and ".join(f"({c})" for c in conditions)
            )
            attrs += f" cond={quoteattr(cond)}"
        if transition.targets:
            attrs += f" target={quoteattr(' '.join(t.id for t in transition.targets))}"
            attrs += ' type="external"' if transition.reenter else ' type="internal"'
        if not transition.actions:
            self._emit(depth, f"<transition{attrs}/>")
            return
        self._emit(depth, f"<transition{attrs}>")
        for action in transition.actions:
            self._action(node, action, depth + 1)
        self._emit(depth, "</transition>")

    def _guard(self, node: StateNode, guard: GuardSpec) -> str:
        if guard.type in ("and", "or"):
            return f" {guard.type} ".join(f"({self._guard(node, c)})" for c in guard.children)
        if guard.type == "not":
            return f"not ({self._guard(node, guard.children[0])})"
        if guard.type == "stateIn":
            return f"In({guard.params!r})"
        if guard.type not in self.machine.implementations.guards:
            raise self._unsupported(node, f"the inline guard {guard.type!r}")
        return f"{guard.type}({_keywords(node, guard.params, self)})"

    def _action(self, node: StateNode, action: ActionSpec, depth: int) -> None:
        impl = action.impl
        if isinstance(impl, Raise) and isinstance(impl.event, str | Mapping) and impl.delay is None:
            event = impl.event if isinstance(impl.event, str) else impl.event.get("type")
            if isinstance(impl.event, Mapping) and len(impl.event) > 1:
                raise self._unsupported(node, "raise with event data")
            self._emit(depth, f"<raise event={quoteattr(str(event))}/>")
        elif isinstance(impl, LogAction) and not callable(impl.value):
            label = f" label={quoteattr(impl.label)}" if impl.label else ""
            self._emit(depth, f"<log{label} expr={quoteattr(repr(thaw(impl.value)))}/>")
        elif (
            isinstance(impl, Assign)
            and isinstance(impl.assignment, Mapping)
            and not any(callable(v) for v in impl.assignment.values())
        ):
            for key, value in impl.assignment.items():
                self._emit(
                    depth,
                    f"<assign location={quoteattr(key)} expr={quoteattr(repr(thaw(value)))}/>",
                )
        elif not action.is_builtin and action.type in self.machine.implementations.actions:
            params = action.params or {}
            if callable(params):
                raise self._unsupported(node, f"params computed by a function for {action.type!r}")
            if not params:
                self._emit(depth, f"<sc:action type={quoteattr(action.type)}/>")
                return
            self._emit(depth, f"<sc:action type={quoteattr(action.type)}>")
            for key, value in params.items():
                self._emit(
                    depth + 1, f"<param name={quoteattr(key)} expr={quoteattr(repr(thaw(value)))}/>"
                )
            self._emit(depth, "</sc:action>")
        else:
            raise self._unsupported(node, f"the action {action.type!r}")


def _keywords(node: StateNode, params: Any, writer: _Writer) -> str:
    if params is None:
        return ""
    if callable(params) or not isinstance(params, Mapping):
        raise writer._unsupported(node, "guard params computed by a function")
    return ", ".join(f"{k}={thaw(v)!r}" for k, v in params.items())


def _priority_order(node: StateNode) -> list[Transition]:
    """Exact event types first, then ``prefix.*`` longest first, then ``*`` (XState's
    priority, which SCXML's document order then reproduces), then eventless ones."""

    def rank(t: Transition) -> tuple[int, int]:
        event = t.event or ""
        if event == "*":
            return (2, 0)
        if event.endswith(".*"):
            return (1, -len(event))
        return (0, 0)

    evented = sorted(node.transitions, key=lambda t: (rank(t), t.order))
    return [*evented, *node.always]
