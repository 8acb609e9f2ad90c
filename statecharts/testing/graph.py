"""Graph tools in the manner of ``xstate/graph``: bounded exploration of what a machine can do,
shortest and simple paths, paths along given events, and the coverage they reach.

A state's identity is its value *plus its context* (and the rest of what decides what happens
next: status, recorded history and pending timers, relative to the current time), so machines
whose guards read the context are explored correctly: ``{"count": 1}`` and ``{"count": 2}`` in
the same state value are different nodes. Exploration is bounded (``max_states``,
``max_depth``); a graph that hit a bound says so (``truncated``) instead of pretending to be
complete.

Everything here uses only the pure core (``machine.start`` / ``step`` / ``deliver_timer``); user
actions are not run, assigns are.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..events import EventLike, normalize_event
from ..frozen import FrozenDict, thaw
from ..machine import Machine, fixed_clock
from ..snapshot import Snapshot
from .coverage import CoverageRecorder, CoverageReport, transition_name
from .outcomes import (
    CutOffs,
    check_outputs,
    done_event,
    error_event,
    error_names,
    outputs_for,
    running_calls,
)

EventSource = Sequence[EventLike] | Callable[[Snapshot], Iterable[EventLike]] | None
StateKey = Hashable


@dataclass(frozen=True)
class Segment:
    """One step of a path: the event sent (or the timer fired) and the snapshot after it."""

    event: FrozenDict
    state: Snapshot
    timer: str | None = None

    def describe(self) -> str:
        """``"GO"``, ``"GO {'amount': 3}"`` or ``"(timer) xstate.after.1000.m.a"``."""
        payload = {k: v for k, v in thaw(self.event).items() if k != "type"}
        text = self.event["type"] + (f" {payload}" if payload else "")
        return f"(timer) {text}" if self.timer is not None else text


@dataclass(frozen=True)
class Path:
    """A way from the initial snapshot to ``state``."""

    state: Snapshot
    steps: tuple[Segment, ...]

    @property
    def events(self) -> list[dict[str, Any]]:
        """The events of the path as plain dicts (timer firings included, as their events)."""
        return [thaw(s.event) for s in self.steps]

    @property
    def event_types(self) -> list[str]:
        """Just the event types, e.g. ``["COIN", "PUSH"]``."""
        return [s.event["type"] for s in self.steps]

    def describe(self) -> str:
        """``(initial) -> GO -> STOP`` style text."""
        return " -> ".join(["(initial)", *(s.describe() for s in self.steps)])


@dataclass(frozen=True)
class Edge:
    """A step between two explored states and the transitions it took."""

    source: StateKey
    segment: Segment
    target: StateKey
    transitions: tuple[str, ...]


@dataclass
class Graph:
    """The explored part of a machine's state space."""

    machine: Machine
    initial: StateKey
    states: dict[StateKey, Snapshot]
    edges: list[Edge]
    parents: dict[StateKey, tuple[StateKey, Segment] | None]
    truncated: bool
    recorder: CoverageRecorder
    times: dict[StateKey, int] = field(default_factory=dict)
    expanded: set[StateKey] = field(default_factory=set)
    cutoffs: list[str] = field(default_factory=list)
    """Where exploration stopped short (bounds hit, calls completed with a placeholder)."""

    def path_to(self, key: StateKey) -> Path:
        """The shortest path (fewest steps) to the state with identity ``key``."""
        segments: list[Segment] = []
        current: StateKey = key
        while True:
            parent = self.parents[current]
            if parent is None:
                break
            current, segment = parent
            segments.append(segment)
        return Path(self.states[key], tuple(reversed(segments)))

    def outgoing(self) -> dict[StateKey, list[Edge]]:
        """Edges by source state."""
        index: dict[StateKey, list[Edge]] = {}
        for edge in self.edges:
            index.setdefault(edge.source, []).append(edge)
        return index

    def coverage(self) -> CoverageReport:
        """The states and transitions reachable within the exploration's bounds."""
        return self.recorder.report()


def state_key(snapshot: Snapshot, now: int = 0) -> StateKey:
    """The identity of a snapshot for exploration: value, context, status, history, pending
    timers (as time left from ``now``), running calls and retry records (attempt, last error,
    time since the first attempt), so a third attempt is not the first one again."""
    history = tuple(sorted(snapshot.history.items()))
    timers = tuple((t.id, t.due_at - now, t.target) for t in snapshot.timers)
    calls = tuple(snapshot.children)
    retries = tuple(
        (state, r["attempt"], r["last_error"], now - r["started_at"])
        for state, r in sorted(snapshot.retries.items())
    )
    return (snapshot.value, snapshot.context, snapshot.status, history, timers, calls, retries)


def event_alphabet(machine: Machine) -> list[FrozenDict]:
    """The events a machine names in ``on`` (engine events and wildcards left out), in
    document order; these are what exploration sends unless told otherwise. Invoke outcomes
    and timers are not in it: they depend on the snapshot (see ``outcomes``)."""
    seen: dict[str, None] = {}
    for node in machine.definition.nodes:
        for transition in node.transitions:
            kind = transition.event
            if kind is None or kind.startswith("xstate.") or kind == "*" or kind.endswith(".*"):
                continue
            seen.setdefault(kind, None)
    return [normalize_event(kind) for kind in seen]


@dataclass(frozen=True)
class Moves:
    """What exploration tries in each state besides the sent events: invoke outcomes (with
    these outputs and error names) and the earliest pending timer."""

    outputs: Mapping[str, Sequence[Any]] | None = None
    errors: Mapping[str, Sequence[str]] | None = None
    invokes: bool = True
    fire_timers: bool = True


def explore(
    machine: Machine,
    events: EventSource = None,
    *,
    input: Any = None,
    max_states: int = 5000,
    max_depth: int | None = None,
    fire_timers: bool = True,
    key: Callable[[Snapshot], StateKey] | None = None,
    outputs: Mapping[str, Sequence[Any]] | None = None,
    errors: Mapping[str, Sequence[str]] | None = None,
    invokes: bool = True,
    on_cutoff: str = "warn",
) -> Graph:
    """Breadth-first exploration from the initial snapshot (started with ``input``).

    ``events``: the events to try in every state (default: ``event_alphabet(machine)``), or a
    function of the snapshot returning them (for payloads that depend on the state).
    ``invokes``: also complete each running call with each of its ``outputs`` (per actor
    name; default ``[None]``) and fail it with each of its error names (see ``outcomes``).
    ``fire_timers``: also try firing the earliest pending timer (time jumps to its due time).
    ``key``: a custom state identity (default ``state_key``).
    ``on_cutoff``: when a bound is hit or a call has no outputs given, ``"warn"`` (an
    ``ExplorationWarning`` naming where), ``"error"`` (``ExplorationCutOff``) or ``"ignore"``.
    """
    check_outputs(machine, outputs, errors)
    moves = Moves(outputs, errors, invokes, fire_timers)
    cutoffs = CutOffs(f"exploration of machine {machine.id!r}", on_cutoff)
    recorder = CoverageRecorder(machine)
    trace: list[Any] = []
    initial, _ = machine.start(input, lambda: 0, trace)
    recorder.macrostep(None, trace, initial)
    start_key = key(initial) if key else state_key(initial, 0)
    graph = Graph(
        machine,
        start_key,
        {start_key: initial},
        [],
        {start_key: None},
        False,
        recorder,
        {start_key: 0},
    )
    depth = {start_key: 0}
    queue = deque([start_key])
    while queue:
        current = queue.popleft()
        snapshot = graph.states[current]
        if snapshot.status != "active":
            continue
        if max_depth is not None and depth[current] >= max_depth:
            graph.truncated = True
            cutoffs.add(
                f"max_depth={max_depth} reached in state {thaw(snapshot.value)!r} "
                f"after {graph.path_to(current).describe()}"
            )
            continue
        now = graph.times[current]
        graph.expanded.add(current)
        for segment, trace in _successors(machine, snapshot, now, events, moves, cutoffs):
            recorder.macrostep(snapshot, trace, segment.state)
            after = now if segment.timer is None else _due(snapshot, segment.timer)
            target = key(segment.state) if key else state_key(segment.state, after)
            graph.edges.append(
                Edge(
                    current,
                    segment,
                    target,
                    tuple(transition_name(t) for _, ts in trace for t in ts),
                )
            )
            if target in graph.states:
                continue
            if len(graph.states) >= max_states:
                graph.truncated = True
                cutoffs.add(
                    f"max_states={max_states} reached: state "
                    f"{thaw(segment.state.value)!r} after "
                    f"{graph.path_to(current).describe()} -> {segment.describe()} "
                    "not explored"
                )
                continue
            graph.states[target] = segment.state
            graph.parents[target] = (current, segment)
            graph.times[target] = after
            depth[target] = depth[current] + 1
            queue.append(target)
    graph.cutoffs = list(cutoffs.notes or {})
    cutoffs.report()
    return graph


def _due(snapshot: Snapshot, timer_id: str) -> int:
    return next(t.due_at for t in snapshot.timers if t.id == timer_id)


def outcome_events(
    machine: Machine, snapshot: Snapshot, moves: Moves, cutoffs: CutOffs | None = None
) -> list[FrozenDict]:
    """The outcome events of every call running in ``snapshot``: done with each example
    output, then failed with each error name."""
    found: list[FrozenDict] = []
    for call in running_calls(machine, snapshot):
        if cutoffs is not None and call.src not in (moves.outputs or {}):
            cutoffs.placeholder(call)
        found += [done_event(call.id, o) for o in outputs_for(call, moves.outputs)]
        found += [error_event(call.id, n) for n in error_names(machine, call, moves.errors)]
    return found


def _successors(
    machine: Machine,
    snapshot: Snapshot,
    now: int,
    events: EventSource,
    moves: Moves,
    cutoffs: CutOffs,
) -> Iterable[tuple[Segment, list[Any]]]:
    candidates = (
        event_alphabet(machine)
        if events is None
        else (events(snapshot) if callable(events) else events)
    )
    outcomes = outcome_events(machine, snapshot, moves, cutoffs) if moves.invokes else []
    for item in [*candidates, *outcomes]:
        normalized = normalize_event(item)
        trace: list[Any] = []
        after, _ = machine.step(snapshot, normalized, lambda: now, trace)
        yield Segment(normalized, after), trace
    if moves.fire_timers and snapshot.timers:
        timer = snapshot.timers[0]  # only the earliest can fire first
        trace = []
        after, _ = machine.deliver_timer(snapshot, timer.id, fixed_clock(timer.due_at), trace)
        yield Segment(timer.event, after, timer.id), trace


def explored_coverage(
    machine: Machine, inputs: Iterable[Any] = (None,), **options: Any
) -> CoverageReport:
    """The coverage of ``explore`` from each of ``inputs`` together (a workflow whose first
    step routes on its input needs one input per route)."""
    recorder = CoverageRecorder(machine)
    for given in inputs:
        recorder.merge(explore(machine, input=given, **options).recorder)
    return recorder.report()


def shortest_paths(machine: Machine, events: EventSource = None, **options: Any) -> list[Path]:
    """The shortest path to every reachable state (within the bounds; see ``explore``)."""
    graph = explore(machine, events, **options)
    return [graph.path_to(k) for k in graph.states]


def simple_paths(
    machine: Machine, events: EventSource = None, *, max_paths: int = 10_000, **options: Any
) -> list[Path]:
    """Paths that visit no state twice, from the initial state to every reachable state, up to
    ``max_paths`` in all (the empty path to the initial state included)."""
    graph = explore(machine, events, **options)
    outgoing = graph.outgoing()
    paths: list[Path] = [Path(graph.states[graph.initial], ())]
    stack: list[tuple[StateKey, tuple[Segment, ...], frozenset[StateKey]]] = [
        (graph.initial, (), frozenset({graph.initial}))
    ]
    while stack and len(paths) < max_paths:
        current, steps, visited = stack.pop()
        for edge in reversed(outgoing.get(current, [])):
            if edge.target in visited or edge.target not in graph.states:
                continue
            new_steps = (*steps, edge.segment)
            paths.append(Path(edge.segment.state, new_steps))
            if len(paths) >= max_paths:
                break
            stack.append((edge.target, new_steps, visited | {edge.target}))
    return paths


def paths_from_events(
    machine: Machine, events: Iterable[EventLike], *, input: Any = None
) -> list[Path]:
    """Follow ``events`` from the initial snapshot: a path to each distinct state visited, by
    the shortest prefix of ``events`` that reached it, in the order first visited."""
    snapshot, _ = machine.start(input, lambda: 0)
    steps: list[Segment] = []
    seen: dict[StateKey, Path] = {state_key(snapshot): Path(snapshot, ())}
    for item in events:
        normalized = normalize_event(item)
        snapshot, _ = machine.step(snapshot, normalized, lambda: 0)
        steps.append(Segment(normalized, snapshot))
        seen.setdefault(state_key(snapshot), Path(snapshot, tuple(steps)))
    return list(seen.values())


def coverage(
    machine: Machine,
    paths: Iterable[Path] = (),
    *,
    event_lists: Iterable[Iterable[EventLike]] = (),
    input: Any = None,
) -> CoverageReport:
    """Coverage reached by replaying ``paths`` and/or plain ``event_lists`` from the initial
    snapshot (timer steps in paths are fired as timers)."""
    recorder = CoverageRecorder(machine)
    replays: list[list[tuple[FrozenDict, str | None]]] = [
        [(s.event, s.timer) for s in p.steps] for p in paths
    ]
    replays += [[(normalize_event(e), None) for e in sequence] for sequence in event_lists]
    for replay in replays:
        trace: list[Any] = []
        snapshot, _ = machine.start(input, lambda: 0, trace)
        recorder.macrostep(None, trace, snapshot)
        now = 0
        for item, timer in replay:
            trace = []
            before = snapshot
            if timer is not None:
                now = max(now, _due(snapshot, timer))
                snapshot, _ = machine.deliver_timer(snapshot, timer, fixed_clock(now), trace)
            else:
                snapshot, _ = machine.step(snapshot, item, fixed_clock(now), trace)
            recorder.macrostep(before, trace, snapshot)
    return recorder.report()
