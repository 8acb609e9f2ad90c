"""``from_python_statemachine`` against python-statemachine itself: random machines are built
as python-statemachine classes (psm_adapter), imported back with ``from_python_statemachine``
and run on this engine; after every event the active states and the context must match the
original class running on python-statemachine (the same known-difference rules apply)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statecharts import InfiniteLoopError
from statecharts.events import normalize_event
from statecharts.testing.interop import from_python_statemachine
from statecharts.testing.strategies import ACTIONS, EVENTS, GUARDS, GeneratedMachine, machines

from .known_differences import (
    history_default_with_actions,
    history_reenters,
    parallel_gap,
    selection_differs,
)
from .psm_adapter import PsmRun, build_class

LOGGING = ("on_enter_state", "on_exit_state")


def _noop(context: Any, event: Any, **params: Any) -> None:
    return None


def _actions() -> dict[str, Any]:
    aliases = {f"{name}_{k}": ACTIONS[name] for name in ACTIONS for k in range(2, 4)}
    return {**ACTIONS, **aliases, **dict.fromkeys(LOGGING, _noop)}


def _diverges(gap: set[Any]) -> bool:
    return any(
        n.history_children or any(a.type not in LOGGING for a in (*n.entry, *n.exit)) for n in gap
    )


@settings(
    max_examples=200,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(generated=machines(), events=st.lists(st.sampled_from(EVENTS), max_size=10))
def test_imported_class_behaves_like_the_class(
    generated: GeneratedMachine, events: list[str]
) -> None:
    cls = build_class(generated.config)
    imported = from_python_statemachine(cls, machine_id="root", context={"n": 0})
    machine = imported.create_machine(guards=GUARDS, actions=_actions())
    try:
        snapshot, _ = machine.initial_transition()
    except InfiniteLoopError:
        return
    original = PsmRun(generated.config)

    def check(where: str) -> None:
        mine = {n.key for n in snapshot.configuration.nodes if n.parent is not None}
        assert mine == original.active, f"{where}: {sorted(mine)} != {sorted(original.active)}"
        assert snapshot.context["n"] == original.n, where

    check("start")
    for index, event in enumerate(events):
        if snapshot.status != "active":
            return
        trace: list[Any] = []
        normalized = normalize_event(event)
        try:
            after, _ = machine.step(snapshot, normalized, lambda: 0, trace)
        except InfiniteLoopError:
            return
        if selection_differs(snapshot, normalized, trace):
            return
        taken = [t for _, ts in trace for t in ts]
        histories = (snapshot.history_nodes, after.history_nodes)
        if (
            history_reenters(taken, snapshot.configuration.node_set, snapshot.history_nodes)
            or history_default_with_actions(taken)
            or _diverges(parallel_gap(taken, histories))
        ):
            return
        original.send(event)
        snapshot = after
        check(f"after {events[: index + 1]}")
