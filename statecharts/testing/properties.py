"""Ready-made properties, one line each:

    assert_deterministic(machine)              # same events, same snapshots and effects
    assert_persistence_invisible(machine)      # persist -> JSON bytes -> restore changes nothing
    assert_no_deadlock(machine)                # no active state that no event or timer leaves
    assert_all_states_reachable(machine)       # every state is active somewhere
    assert_final_always_reachable(machine)     # from everywhere, a final state can be reached

or ``assert_properties(machine, "determinism", "no_deadlock", ...)``. A failure raises
``PropertyViolation`` (an ``AssertionError``) whose message shows the counterexample as an
event list and whose ``events`` holds it. The first two draw event lists with Hypothesis and
report the *shrunk* list; the last three explore the state space (``graph.explore``) and
report a shortest path, which is minimal by construction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings

from ..events import EventLike, normalize_event
from ..frozen import thaw
from ..machine import Machine
from ..snapshot import Snapshot, persist, snapshot_to_json
from .graph import EventSource, Graph, StateKey, explore
from .strategies import events as event_lists


class PropertyViolation(AssertionError):
    """A property does not hold; ``events`` is the counterexample (from the initial state)."""

    def __init__(self, prop: str, message: str, events: Sequence[Any] = ()) -> None:
        self.property = prop
        self.events = [thaw(normalize_event(e)) for e in events]
        shown = " -> ".join(_describe(e) for e in self.events) or "(no events)"
        super().__init__(f"{prop}: {message}\n  counterexample: {shown}")

    @property
    def event_types(self) -> list[str]:
        """The counterexample's event types."""
        return [e["type"] for e in self.events]


def _describe(event: Mapping[str, Any]) -> str:
    payload = {k: v for k, v in event.items() if k != "type"}
    return f"{event['type']} {payload}" if payload else str(event["type"])


def _hypothesis_settings(max_examples: int) -> settings:
    return settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


def _run_sequences(check: Callable[[list[Any]], None], machine: Machine,
                   payloads: Mapping[str, Any] | None, max_steps: int,
                   max_examples: int) -> None:
    strategy = event_lists(machine, payloads, max_size=max_steps)

    @_hypothesis_settings(max_examples)
    @given(sequence=strategy)
    def run(sequence: list[Any]) -> None:
        check(sequence)

    run()


def _fingerprint(snapshot: Snapshot, effects: Sequence[Any]) -> tuple[Any, Any]:
    return machine_persist(snapshot), [e.to_json() for e in effects]


def machine_persist(snapshot: Snapshot) -> dict[str, Any]:
    """The persisted form of ``snapshot`` (what the properties compare)."""
    return persist(snapshot)


def deterministic_on(machine: Machine, sequence: Sequence[EventLike], input: Any = None,
                     twin: Machine | None = None) -> None:
    """Raise ``PropertyViolation`` unless ``sequence`` gives the same snapshots and effects on
    ``machine`` and on a separately built twin computing every transition plan afresh."""
    if twin is None:
        twin = Machine(machine.config, machine.implementations, machine.version,
                       machine.migrations)
        twin.plans = False
    first, first_effects = machine.initial_transition(input)
    second, second_effects = twin.initial_transition(input)
    _same("determinism", first, first_effects, second, second_effects, [])
    for index, item in enumerate(sequence):
        first, first_effects = machine.transition(first, item)
        second, second_effects = twin.step(second, normalize_event(item), lambda: 0, [])
        _same("determinism", first, first_effects, second, second_effects,
              sequence[:index + 1])


def assert_deterministic(machine: Machine, *, payloads: Mapping[str, Any] | None = None,
                         max_steps: int = 20, max_examples: int = 100, input: Any = None
                         ) -> None:
    """The same events give the same snapshots and effects: on a second, separately built
    machine that computes every transition plan afresh instead of reusing kept ones (and
    traces every step). Catches guards, assigns or context factories that read clocks,
    randomness or global state."""
    twin = Machine(machine.config, machine.implementations, machine.version,
                   machine.migrations)
    twin.plans = False
    _run_sequences(lambda sequence: deterministic_on(machine, sequence, input, twin), machine,
                   payloads, max_steps, max_examples)


def _same(prop: str, a: Snapshot, a_effects: Sequence[Any], b: Snapshot,
          b_effects: Sequence[Any], sequence: Sequence[Any]) -> None:
    left, right = _fingerprint(a, a_effects), _fingerprint(b, b_effects)
    if left != right:
        what = "snapshots" if left[0] != right[0] else "effects"
        raise PropertyViolation(prop, f"the same events gave different {what}:\n"
                                f"    {left[0 if what == 'snapshots' else 1]}\n"
                                f"    {right[0 if what == 'snapshots' else 1]}", sequence)


def persistence_invisible_on(machine: Machine, sequence: Sequence[EventLike],
                             input: Any = None) -> None:
    """Raise ``PropertyViolation`` unless persisting to JSON bytes and restoring before every
    event of ``sequence`` leaves the snapshots and effects unchanged."""
    def roundtrip(snapshot: Snapshot, done: Sequence[Any]) -> Snapshot:
        try:
            return machine.restore(snapshot_to_json(snapshot))
        except Exception as exc:  # orjson or restore: either way the snapshot did not survive
            raise PropertyViolation("persistence", f"persisting failed: {exc!r}",
                                    done) from exc

    straight, _ = machine.initial_transition(input)
    stored = roundtrip(straight, [])
    _same("persistence", straight, (), stored, (), [])
    for index, item in enumerate(sequence):
        straight, straight_effects = machine.transition(straight, item)
        stored = roundtrip(stored, sequence[:index])
        stored, stored_effects = machine.transition(stored, item)
        _same("persistence", straight, straight_effects, stored, stored_effects,
              sequence[:index + 1])
    roundtrip(stored, sequence)


def assert_persistence_invisible(machine: Machine, *,
                                 payloads: Mapping[str, Any] | None = None,
                                 max_steps: int = 20, max_examples: int = 100,
                                 input: Any = None) -> None:
    """Persisting a snapshot to JSON bytes and restoring it, before every event, changes
    neither the snapshots nor the effects."""
    _run_sequences(lambda sequence: persistence_invisible_on(machine, sequence, input),
                   machine, payloads, max_steps, max_examples)


def _explored(machine: Machine, events: EventSource, options: Mapping[str, Any]) -> Graph:
    return explore(machine, events, **options)


def assert_no_deadlock(machine: Machine, events: EventSource = None, **explore_options: Any
                       ) -> None:
    """No reachable active (non-final) state is a trap: some event or pending timer leads to a
    different state. ``events`` and the options are those of ``graph.explore``."""
    graph = _explored(machine, events, explore_options)
    outgoing = graph.outgoing()
    for key, snapshot in graph.states.items():
        if snapshot.status != "active":
            continue
        exits = [e for e in outgoing.get(key, []) if e.target != key]
        if not exits and key in graph.expanded:
            path = graph.path_to(key)
            raise PropertyViolation("no deadlock", f"state {thaw(snapshot.value)!r} with "
                                    f"context {thaw(snapshot.context)!r} is not final and "
                                    "nothing leaves it", path.events)


def assert_all_states_reachable(machine: Machine, events: EventSource = None,
                                **explore_options: Any) -> None:
    """Every state of the machine is active in some reachable snapshot."""
    graph = _explored(machine, events, explore_options)
    missing = graph.coverage().unreached_states
    if missing:
        bound = " (exploration hit its bounds; raise max_states/max_depth)" \
            if graph.truncated else ""
        raise PropertyViolation("every state reachable",
                                f"never active: {', '.join(missing)}{bound}")


def assert_final_always_reachable(machine: Machine, events: EventSource = None,
                                  **explore_options: Any) -> None:
    """From every reachable state some path leads to a final (``done``) snapshot. States
    beyond the exploration bounds count as possibly reaching one."""
    graph = _explored(machine, events, explore_options)
    outgoing = graph.outgoing()
    good: set[StateKey] = {k for k, s in graph.states.items() if s.status == "done"}
    # beyond the bounds nothing is known: count unexplored successors as good
    good |= {k for k, edges in outgoing.items() if any(e.target not in graph.states
                                                       for e in edges)}
    good |= {k for k, s in graph.states.items() if s.status == "active" and
             k not in graph.expanded}
    changed = True
    while changed:
        changed = False
        for key, edges in outgoing.items():
            if key not in good and any(e.target in good for e in edges):
                good.add(key)
                changed = True
    for key, snapshot in graph.states.items():
        if key not in good:
            path = graph.path_to(key)
            raise PropertyViolation("final state always reachable",
                                    f"from state {thaw(snapshot.value)!r} with context "
                                    f"{thaw(snapshot.context)!r} no final state can be reached",
                                    path.events)


PROPERTIES: dict[str, Callable[..., None]] = {
    "determinism": assert_deterministic,
    "persistence": assert_persistence_invisible,
    "no_deadlock": assert_no_deadlock,
    "all_states_reachable": assert_all_states_reachable,
    "final_always_reachable": assert_final_always_reachable,
}


def assert_properties(machine: Machine, *names: str, events: Sequence[EventLike] | None = None,
                      payloads: Mapping[str, Any] | None = None) -> None:
    """Check the named properties (all of them when no name is given); ``events`` is the list
    exploration sends, ``payloads`` the per-event payload strategies for the sampled ones."""
    unknown = [n for n in names if n not in PROPERTIES]
    if unknown:
        raise ValueError(f"unknown properties {unknown}; known: {sorted(PROPERTIES)}")
    for name in names or tuple(PROPERTIES):
        if name in ("determinism", "persistence"):
            PROPERTIES[name](machine, payloads=payloads)
        else:
            PROPERTIES[name](machine, events)


__all__ = ["PROPERTIES", "PropertyViolation", "assert_all_states_reachable",
           "assert_deterministic", "assert_final_always_reachable", "assert_no_deadlock",
           "assert_persistence_invisible", "assert_properties", "deterministic_on",
           "persistence_invisible_on"]
