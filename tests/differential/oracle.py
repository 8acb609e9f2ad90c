"""The differential oracle: one generated machine, one event list, run on this engine and on
python-statemachine 3.2.2; after the start and after every event the active states, the order
of entries and exits and the context must agree, except where a rule in
``known_differences.py`` says why not."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from statecharts import InfiniteLoopError
from statecharts.effects import RunAction
from statecharts.events import normalize_event
from statecharts.frozen import EMPTY
from statecharts.machine import Machine
from statecharts.nodes import StateNode
from statecharts.snapshot import Snapshot
from statecharts.testing.strategies import GeneratedMachine

from .known_differences import (
    DIFFERENCES,
    entered_while_active,
    history_default_with_actions,
    parallel_gap,
    selection_differs,
)
from .psm_adapter import ROOT, PsmRun

COMPLETE = "complete"
Log = list[tuple[str, str]]


class Disagreement(AssertionError):
    """The engines disagree where no known difference explains it."""


def _noop(context: Any, event: Any, **params: Any) -> None:
    return None


TRACE_ACTIONS = {"trace_enter": _noop, "trace_exit": _noop}


def instrument(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with an entry and an exit action on every state that name the state, so the
    engine's effects show the entry/exit order."""
    result = copy.deepcopy(dict(config))

    def walk(node: dict[str, Any], key: str) -> None:
        if node.get("type") == "history":
            return
        node["entry"] = [{"type": "trace_enter", "params": {"s": key}}, *node.get("entry", [])]
        node["exit"] = [{"type": "trace_exit", "params": {"s": key}}, *node.get("exit", [])]
        for child_key, child in (node.get("states") or {}).items():
            walk(child, child_key)

    walk(result, ROOT)
    return result


def engine_log(effects: Sequence[Any]) -> Log:
    """The entries and exits in the engine's effects, in order."""
    return [
        ("enter" if e.type == "trace_enter" else "exit", e.params["s"])
        for e in effects
        if isinstance(e, RunAction) and e.type in TRACE_ACTIONS
    ]


def active_keys(snapshot: Snapshot) -> set[str]:
    """Keys of the active states, the root as ``m``."""
    return {n.key for n in snapshot.configuration.nodes}


def _strip_final_exits(snapshot: Snapshot, log: Log, where: str) -> Log:
    """Rule ``final_exits_on_done``: the engine's trailing exits on completion must be the
    final configuration in reverse document order; they are then left out."""
    expected = [("exit", n.key) for n in reversed(snapshot.configuration.nodes)]
    tail = log[len(log) - len(expected) :]
    if tail != expected:
        raise Disagreement(
            f"{where}: on completion the engine should exit {expected}, its log ends with {tail}"
        )
    return log[: len(log) - len(expected)]


def start_traced(machine: Machine, trace: list[Any]) -> tuple[Snapshot, tuple[Any, ...]]:
    """``machine.initial_transition()`` that also records its microsteps in ``trace`` (what
    ``Machine.start`` does, with the step's trace switched on)."""
    return machine.start(None, lambda: 0, trace)


def compare(generated: GeneratedMachine, events: Sequence[str], plans: bool = True) -> str:
    """Run both engines; raise ``Disagreement`` or return ``"complete"`` or the name of the
    known difference that stopped the comparison. ``plans=False``: this engine computes
    every microstep's plan afresh instead of reusing kept ones."""
    machine: Machine = GeneratedMachine(
        instrument(generated.config), generated.event_types, generated.guards, generated.actions
    ).build(TRACE_ACTIONS)
    machine.plans = plans
    trace: list[Any] = []
    try:
        snapshot, effects = start_traced(machine, trace)
    except InfiniteLoopError:
        return DIFFERENCES["eventless_loop"].name
    taken = [t for _, ts in trace for t in ts]
    other = PsmRun(generated.config)
    mine = engine_log(effects)
    if snapshot.status == "done":
        mine = _strip_final_exits(snapshot, mine, "start")
    gap = parallel_gap(taken, (EMPTY, snapshot.history_nodes))
    if _gap_diverges(gap):
        return DIFFERENCES["parallel_transition_domain"].name
    _check("start", snapshot, mine, other, other.initial_log, gap)
    for index, event in enumerate(events):
        where = f"after events {list(events[: index + 1])}"
        if snapshot.status != "active":
            break
        trace = []
        normalized = normalize_event(event)
        try:
            after, effects = machine.step(snapshot, normalized, lambda: 0, trace)
        except InfiniteLoopError:
            return DIFFERENCES["eventless_loop"].name
        if selection_differs(snapshot, normalized, trace):
            # without a parallel state both select by walking up from the one atomic state
            if not any(n.type == "parallel" for n in snapshot.configuration.nodes):
                raise Disagreement(
                    f"{where}: the engine selected {trace[:1]} where SCXML "
                    "selects differently, with no parallel state active"
                )
            return DIFFERENCES["parallel_selection"].name
        taken = [t for _, ts in trace for t in ts]
        histories = (snapshot.history_nodes, after.history_nodes)
        if history_default_with_actions(taken):
            return DIFFERENCES["psm_history_default_repeats_actions"].name
        gap = parallel_gap(taken, histories)
        mine = engine_log(effects)
        reentered = entered_while_active(active_keys(snapshot), mine)
        if reentered is not None:
            if not any(t.has_history_target for t in taken):
                raise Disagreement(
                    f"{where}: the engine entered {reentered!r} while it was active: {mine}"
                )
            return DIFFERENCES["history_reenters_active_state"].name
        if after.status == "done":
            mine = _strip_final_exits(after, mine, where)
        if _gap_diverges(gap):
            return DIFFERENCES["parallel_transition_domain"].name
        _check(where, after, mine, other, other.send(event), gap)
        snapshot = after
    return COMPLETE


def _gap_diverges(gap: set[StateNode]) -> bool:
    """Rule parallel_transition_domain: SCXML's extra exit and entry of ``gap`` changes more
    than the log when those states have actions or history children."""
    return any(
        n.history_children or any(a.type not in TRACE_ACTIONS for a in (*n.entry, *n.exit))
        for n in gap
    )


def _check(
    where: str, snapshot: Snapshot, mine: Log, other: PsmRun, theirs: Log, gap_nodes: set[StateNode]
) -> None:
    gap = {n.key for n in gap_nodes}
    problems = []
    if active_keys(snapshot) != other.active:
        problems.append(
            f"active states: engine {sorted(active_keys(snapshot))}, "
            f"python-statemachine {sorted(other.active)}"
        )
    mine_cmp = [item for item in mine if item[1] not in gap]
    theirs_cmp = [item for item in theirs if item[1] not in gap]
    if mine_cmp != theirs_cmp:
        note = f" (leaving out {sorted(gap)} by rule parallel_transition_domain)" if gap else ""
        problems.append(
            f"entry/exit order{note}:\n    engine             {mine_cmp}\n"
            f"    python-statemachine {theirs_cmp}"
        )
    if snapshot.context["n"] != other.n:
        problems.append(f"context n: engine {snapshot.context['n']}, python-statemachine {other.n}")
    done_there = any(
        s.final and s.parent is not None and s.parent.id == ROOT for s in other.sm.configuration
    )
    if (snapshot.status == "done") != done_there:
        problems.append(
            f"completion: engine status {snapshot.status!r}, python-statemachine "
            f"{'in' if done_there else 'not in'} a top-level final state"
        )
    if problems:
        raise Disagreement(f"{where}:\n  " + "\n  ".join(problems))
