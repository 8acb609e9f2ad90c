"""Shared helpers for the core semantics tests.

Every table row is run twice: through the pure core (reading the ``RunAction`` effects that
``machine.transition`` returns) and through the in-memory actor (user actions that append
their names to a list as they run). ``traced`` puts a recording entry action ``+path`` and exit
action ``-path`` first on every state, so the tables can spell out entry/exit/transition order.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from statecharts import (
    SimulatedClock,
    Snapshot,
    create_actor,
    create_machine,
    snapshot_to_json,
    thaw,
)
from statecharts.effects import Effect, RunAction
from statecharts.machine import Machine

ROOT_LABEL = "(root)"
ACTION_KEYS = ("entry", "exit", "actions")


def traced(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` whose states record their entry (``+a.b``) and exit (``-a.b``)."""
    result = copy.copy(dict(config))
    _trace_state(result, "")
    return result


def _trace_state(state: dict[str, Any], path: str) -> None:
    if state.get("type") == "history":
        return
    label = path or ROOT_LABEL
    state["entry"] = [f"+{label}", *_as_list(state.get("entry"))]
    state["exit"] = [f"-{label}", *_as_list(state.get("exit"))]
    states = state.get("states")
    if isinstance(states, Mapping):
        copied = {}
        for key, child in states.items():
            child_copy = dict(child)
            _trace_state(child_copy, f"{path}.{key}" if path else key)
            copied[key] = child_copy
        state["states"] = copied


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def action_names(config: Any) -> set[str]:
    """Every named action (a string, or a ``{"type": ...}`` mapping) the config mentions."""
    found: set[str] = set()
    _collect_names(config, found)
    return found


def _collect_names(node: Any, found: set[str]) -> None:
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key in ACTION_KEYS:
                for item in _as_list(value):
                    if isinstance(item, str):
                        found.add(item)
                    elif isinstance(item, Mapping) and isinstance(item.get("type"), str):
                        found.add(item["type"])
            _collect_names(value, found)
    elif isinstance(node, list | tuple):
        for item in node:
            _collect_names(item, found)


def recorders(names: Iterable[str], sink: list[str]) -> dict[str, Callable[..., None]]:
    """One user action per name; each appends its name to ``sink`` when the runtime runs it."""

    def recorder(name: str) -> Callable[..., None]:
        def run(context: Any, event: Any, **params: Any) -> None:
            sink.append(name)

        run.__name__ = name
        return run

    return {name: recorder(name) for name in names}


def build(
    config: Mapping[str, Any],
    *,
    trace: bool = True,
    guards: Mapping[str, Any] | None = None,
    actions: Mapping[str, Any] | None = None,
    sink: list[str] | None = None,
    **kwargs: Any,
) -> Machine:
    """A machine for ``config`` whose named actions not given in ``actions`` record into
    ``sink`` (or do nothing when no sink is given)."""
    full = traced(config) if trace else dict(config)
    given = dict(actions or {})
    missing = action_names(full) - set(given)
    implementations = {**recorders(missing, sink if sink is not None else []), **given}
    return create_machine(full, guards=guards, actions=implementations, **kwargs)


def user_actions(effects: Iterable[Effect]) -> list[str]:
    """The names of the user actions among ``effects``, in order."""
    return [e.type for e in effects if isinstance(e, RunAction)]


def effects_json(effects: Iterable[Effect]) -> bytes:
    """The effects as the JSON a durable runtime would store."""
    return orjson.dumps([e.to_json() for e in effects], option=orjson.OPT_SORT_KEYS)


@dataclass
class Outcome:
    """What a run produced: the final snapshot and the user actions recorded."""

    snapshot: Snapshot
    actions: list[str]
    effects: list[Effect] = field(default_factory=list)


def run_pure(
    machine: Machine, events: Iterable[Any], given: Iterable[Any] | None = None
) -> Outcome:
    """Start ``machine``, send ``given`` (unrecorded), then ``events`` (recorded). With
    ``given=None`` the initial transition's actions are recorded too."""
    snapshot, effects = machine.initial_transition()
    recorded: list[Effect] = list(effects) if given is None else []
    for event in given or ():
        snapshot, _ = machine.transition(snapshot, event)
    for event in events:
        snapshot, effects = machine.transition(snapshot, event)
        recorded.extend(effects)
    return Outcome(snapshot, user_actions(recorded), recorded)


def run_actor(
    config: Mapping[str, Any],
    events: Iterable[Any],
    given: Iterable[Any] | None = None,
    **build_kwargs: Any,
) -> Outcome:
    """Like ``run_pure`` but through ``create_actor(...).start()``: the actions really run."""
    sink: list[str] = []
    machine = build(config, sink=sink, **build_kwargs)
    actor = create_actor(machine, clock=SimulatedClock()).start()
    if given is not None:
        for event in given:
            actor.send(event)
        sink.clear()
    for event in events:
        actor.send(event)
    return Outcome(actor.get_snapshot(), list(sink))


def plain(value: Any) -> Any:
    """A frozen value as plain dicts and lists (for readable assertion diffs)."""
    return thaw(value)


def round_trip(machine: Machine, snapshot: Snapshot) -> Snapshot:
    """Persist through real JSON bytes and restore."""
    return machine.restore(snapshot_to_json(snapshot))
