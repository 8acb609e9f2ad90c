"""Run a generated machine (``statecharts.testing.strategies.machines``) on python-statemachine
3.2.2's ``StateChart``, recording what the oracle compares: the active states, the order of
state entries and exits, and the context counter ``n``.

The translation applies the *mapping* rules of ``known_differences.py`` (those that say how an
XState construct is written in SCXML terms); it never drops a construct silently: anything it
cannot express raises ``Untranslatable``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statemachine import StateChart
from statemachine.engines.sync import SyncEngine
from statemachine.graph import iterate_states
from statemachine.io.class_factory import create_machine_class_from_definition
from statemachine.orderedset import OrderedSet

ROOT = "m"
MAX_ENTRIES = 10_000  # python-statemachine has no eventless-loop guard of its own


class Untranslatable(Exception):
    """The config uses something the translation does not cover."""


class LoopGuard(RuntimeError):
    """python-statemachine entered states ``MAX_ENTRIES`` times in one event."""


def _key(target: str) -> str:
    return target.rsplit(".", 1)[-1]


def _index(config: Mapping[str, Any]) -> dict[str, tuple[Mapping[str, Any], str | None]]:
    """key -> (state config, parent key), the root included under ``ROOT``."""
    found: dict[str, tuple[Mapping[str, Any], str | None]] = {ROOT: (config, None)}

    def walk(node: Mapping[str, Any], key: str) -> None:
        for child_key, child in (node.get("states") or {}).items():
            found[child_key] = (child, key)
            walk(child, child_key)

    walk(config, ROOT)
    return found


def _kind(node: Mapping[str, Any]) -> str:
    if node.get("type"):
        return str(node["type"])
    return "compound" if node.get("states") else "atomic"


def _is_within(key: str, ancestor: str, index: Mapping[str, tuple[Any, str | None]]) -> bool:
    current: str | None = key
    while current is not None:
        if current == ancestor:
            return True
        current = index[current][1]
    return False


def distinct_names(actions: list[str]) -> list[str]:
    """Rule psm_repeated_callback: python-statemachine runs a callback named twice in one list
    once, so the second ``inc`` becomes its alias ``inc_2``."""
    seen: dict[str, int] = {}
    names = []
    for name in actions:
        seen[name] = seen.get(name, 0) + 1
        names.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return names


def translate_transition(
    source: str,
    transition: Mapping[str, Any],
    index: Mapping[str, tuple[Mapping[str, Any], str | None]],
) -> dict[str, Any]:
    """One XState transition as a python-statemachine transition dict (see the mapping rules
    ``self_transition_atomic``, ``self_transition_compound`` and ``internal_means_no_reentry``
    in known_differences.py)."""
    result: dict[str, Any] = {}
    if transition.get("guard"):
        result["cond"] = transition["guard"]
    if transition.get("actions"):
        result["on"] = distinct_names(transition["actions"])
    target = transition.get("target")
    if target is None:
        result["target"] = None
        return result
    if isinstance(target, list):
        raise Untranslatable("multiple targets")
    key = _key(target)
    reenter = bool(transition.get("reenter"))
    source_kind = _kind(index[source][0])
    if not reenter and key == source:
        if source_kind == "atomic":
            result["target"] = None  # XState: no exit, no entry; a targetless transition
            return result
        if source_kind == "compound":
            result["target"] = index[source][0]["initial"]
            result["internal"] = True
            return result
    result["target"] = key
    inside = key != source and _is_within(key, source, index)
    result["internal"] = not reenter and inside and source_kind == "compound"
    return result


def _state(
    key: str, node: Mapping[str, Any], index: Mapping[str, tuple[Any, str | None]], initial: bool
) -> dict[str, Any]:
    kind = _kind(node)
    state: dict[str, Any] = {"initial": initial}
    if kind == "final":
        state["final"] = True
    if kind == "parallel":
        state["parallel"] = True
    if node.get("entry"):
        state["enter"] = distinct_names(node["entry"])
    if node.get("exit"):
        state["exit"] = distinct_names(node["exit"])
    children = node.get("states") or {}
    regular = {k: c for k, c in children.items() if _kind(c) != "history"}
    if regular:
        state["states"] = {
            k: _state(k, c, index, kind == "parallel" or k == node.get("initial"))
            for k, c in regular.items()
        }
    history = {k: c for k, c in children.items() if _kind(c) == "history"}
    if history:
        if kind != "compound":
            raise Untranslatable("history in a parallel state")
        state["history"] = {
            k: {
                "type": c.get("history", "shallow"),
                # python-statemachine enters nothing for a history state without a default
                # transition; XState's default is the parent's initial state
                "transitions": [{"target": c.get("target") or node["initial"]}],
            }
            for k, c in history.items()
        }
    on: dict[str, list[dict[str, Any]]] = {}
    for event, transitions in (node.get("on") or {}).items():
        items = transitions if isinstance(transitions, list) else [transitions]
        on[event] = [translate_transition(key, t, index) for t in items]
    if node.get("onDone") is not None:
        done = node["onDone"]
        items = done if isinstance(done, list) else [done]
        on[f"done.state.{key}"] = [translate_transition(key, t, index) for t in items]
    if on:
        state["on"] = on
    if node.get("always"):
        state["transitions"] = [translate_transition(key, t, index) for t in node["always"]]
    return state


def build_class(config: Mapping[str, Any]) -> type[StateChart]:
    """A StateChart class for ``config``: the XState root becomes an explicit compound state
    ``m`` (rule ``root_is_a_state``)."""
    index = _index(config)
    root = _state(ROOT, config, index, True)

    def on_enter_state(self: Any, state: Any) -> None:
        self.entries += 1
        if self.entries > MAX_ENTRIES:
            raise LoopGuard(f"more than {MAX_ENTRIES} state entries for one event")
        self.log.append(("enter", state.id))

    def on_exit_state(self: Any, state: Any) -> None:
        self.log.append(("exit", state.id))

    def even(self: Any) -> bool:
        return bool(self.ctx["n"] % 2 == 0)

    def odd(self: Any) -> bool:
        return bool(self.ctx["n"] % 2 == 1)

    def small(self: Any) -> bool:
        return bool(self.ctx["n"] < 2)

    def inc(self: Any) -> None:
        self.ctx["n"] = (self.ctx["n"] + 1) % 4

    def reset(self: Any) -> None:
        self.ctx["n"] = 0

    def _get_engine(self: Any) -> SyncEngine:
        return DocumentOrderEngine(self)

    cls = create_machine_class_from_definition(
        "Generated",
        {ROOT: root},
        on_enter_state=on_enter_state,
        on_exit_state=on_exit_state,
        even=even,
        odd=odd,
        small=small,
        inc=inc,
        reset=reset,
        _get_engine=_get_engine,
        **{f"{name}_{k}": fn for name, fn in (("inc", inc), ("reset", reset)) for k in range(2, 4)},
        validate_disconnected_states=False,
        validate_trap_states=False,
        validate_final_reachability=False,
        catch_errors_as_events=False,
    )
    # rule psm_document_order: number states in document (pre-)order, as SCXML defines it
    for order, state in enumerate(iterate_states(cls.states), start=1):
        state.document_order = order
    return cls


class DocumentOrderEngine(SyncEngine):
    """python-statemachine's engine, selecting transitions for the atomic states in document
    order as the SCXML algorithm says (3.2.2 uses the order states were entered; its source
    marks this "TODO: sorted by document order"). Rule psm_selection_order."""

    def _select_transitions(self, trigger_data: Any, predicate: Any) -> Any:
        enabled = OrderedSet()
        atomic = sorted(
            (s for s in self.sm.configuration if s.is_atomic), key=lambda s: s.document_order
        )
        for state in atomic:
            transition = self._first_transition_that_matches(state, trigger_data, predicate)
            if transition is not None:
                enabled.add(transition)
        return self._filter_conflicting_transitions(enabled)


class PsmRun:
    """A running python-statemachine instance of a generated machine."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        cls = build_class(config)
        self.sm = cls.__new__(cls)
        # set before __init__, which enters the initial states and so calls the callbacks
        object.__setattr__(self.sm, "log", [])
        object.__setattr__(self.sm, "ctx", {"n": 0})
        object.__setattr__(self.sm, "entries", 0)
        self.sm.__init__()  # type: ignore[misc]
        self.initial_log = self.take_log()

    def take_log(self) -> list[tuple[str, str]]:
        """The entries/exits since the last call."""
        log = list(self.sm.log)  # type: ignore[attr-defined]
        self.sm.log.clear()  # type: ignore[attr-defined]
        object.__setattr__(self.sm, "entries", 0)
        return log

    def send(self, event: str) -> list[tuple[str, str]]:
        """Send ``event``; the entries/exits it caused."""
        self.sm.send(event)
        return self.take_log()

    @property
    def active(self) -> set[str]:
        """Ids of the active states (the root ``m`` included)."""
        return {s.id for s in self.sm.configuration}

    @property
    def n(self) -> int:
        """The context counter."""
        return int(self.sm.ctx["n"])  # type: ignore[attr-defined]
