"""Hypothesis strategies: events a machine understands, snapshots it can reach, and random
valid statecharts for testing the engine itself.

``events(machine)`` draws lists of events from the machine's alphabet (the event types its
``on`` transitions name), with a payload strategy per event type if given.
``stories(machine)`` draws complete stories of a run: at each step one of the alphabet's
events, an outcome of a running call (done with an output drawn per actor name, or each
declared error) or the firing of the next timer, so workflows are explored past their first
invoke. ``reachable_snapshots(machine)`` draws the snapshot a story ends in.
``machines()`` draws ``GeneratedMachine``s: JSON configs using compound, parallel, history and
final states, eventless transitions, guards on the context and assigns, with the matching
implementations. Every draw shrinks: fewer states, fewer transitions, simpler kinds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..actions import assign
from ..errors import ContextError
from ..events import EventLike, normalize_event
from ..frozen import FrozenDict
from ..machine import Machine, create_machine
from ..snapshot import Snapshot
from .graph import event_alphabet
from .hypothesis_api import st
from .outcomes import (
    DEFAULT_OUTPUT,
    Call,
    check_outputs,
    done_event,
    error_event,
    error_names,
    is_possible,
    is_transient,
    running_calls,
)

OutputStrategies = Mapping[str, st.SearchStrategy[Any] | Sequence[Any]]
"""Outputs per actor name: a strategy, or a list of examples to sample from."""

# -- events ----------------------------------------------------------------------------------


def event(
    machine: Machine,
    payloads: Mapping[str, st.SearchStrategy[Mapping[str, Any]]] | None = None,
    *,
    types: Sequence[str] | None = None,
) -> st.SearchStrategy[FrozenDict]:
    """One event the machine understands. ``payloads`` maps an event type to a strategy of
    its extra fields (``{"PAY": st.fixed_dictionaries({"amount": st.integers(0, 100)})}``);
    ``types`` restricts or extends the alphabet."""
    alphabet = list(types) if types is not None else [e["type"] for e in event_alphabet(machine)]
    if not alphabet:
        raise ValueError(f"machine {machine.id!r} names no events in 'on'; pass types=")
    payloads = payloads or {}
    unknown = sorted(set(payloads) - set(alphabet))
    if unknown:
        raise ValueError(f"payloads for {unknown} but the machine's events are {alphabet}")

    def one(kind: str) -> st.SearchStrategy[FrozenDict]:
        if kind not in payloads:
            return st.just(normalize_event(kind))
        return payloads[kind].map(lambda extra: normalize_event({**extra, "type": kind}))

    # one_of (not flatmap) so that Hypothesis shrinks towards earlier event types
    return st.one_of([one(kind) for kind in alphabet])


event_strategy = event


def events(
    machine: Machine,
    payloads: Mapping[str, st.SearchStrategy[Mapping[str, Any]]] | None = None,
    *,
    types: Sequence[str] | None = None,
    min_size: int = 0,
    max_size: int = 20,
) -> st.SearchStrategy[list[FrozenDict]]:
    """Lists of events the machine understands (see ``event``); shrinks to shorter lists of
    earlier event types."""
    return st.lists(event(machine, payloads, types=types), min_size=min_size, max_size=max_size)


def run_events(machine: Machine, sequence: Sequence[EventLike], input: Any = None) -> Snapshot:
    """The snapshot after the story ``sequence`` from the initial one (pure). Timer firings
    are events with a ``timer`` key (time jumps to their due time); an outcome of a call that
    is not running is skipped."""
    now = 0
    snapshot, _ = machine.initial_transition(input, now)
    for item in sequence:
        event = normalize_event(item)
        if "timer" in event:
            due = next((t.due_at for t in snapshot.timers if t.id == event["timer"]), None)
            if due is not None:
                now = max(now, due)
                snapshot, _ = machine.fire_timer(snapshot, event["timer"], now)
        elif is_possible(machine, snapshot, event):
            snapshot, _ = machine.transition(snapshot, event, now)
    return snapshot


def output_strategy(call: Call, outputs: OutputStrategies | None) -> st.SearchStrategy[Any] | None:
    """The outputs ``call`` may complete with (``DEFAULT_OUTPUT`` when none are given; None
    when an empty list is: the call only fails)."""
    given = (outputs or {}).get(call.src)
    if given is None:
        return st.just(DEFAULT_OUTPUT)
    if isinstance(given, st.SearchStrategy):
        return given
    examples = list(given)
    return st.sampled_from(examples) if examples else None


def outcome_strategy(
    machine: Machine,
    call: Call,
    outputs: OutputStrategies | None = None,
    errors: Mapping[str, Sequence[str]] | None = None,
    *,
    durable: bool = False,
) -> st.SearchStrategy[FrozenDict]:
    """One outcome of ``call``: done with an output, or failed with one of its error names
    (shrinks towards success). ``durable``: without the failures the durable runtime rolls
    back and retries (the call site's ``transient`` names), which no run sees as an outcome."""
    names = [
        n for n in error_names(machine, call, errors) if not (durable and is_transient(call, n))
    ]
    failed = st.sampled_from(names).map(lambda name: error_event(call.id, name)) if names else None
    done = output_strategy(call, outputs)
    if done is None:
        return failed if failed is not None else st.just(done_event(call.id, None))
    succeeded = done.map(lambda output: done_event(call.id, output))
    return succeeded if failed is None else st.one_of(succeeded, failed)


@dataclass(frozen=True)
class Story:
    """A drawn story: its steps (timer firings carry a ``timer`` key) and the snapshots after
    the start and after each step (``times[i]`` is the clock at ``snapshots[i]``)."""

    events: tuple[FrozenDict, ...]
    snapshots: tuple[Snapshot, ...]
    times: tuple[int, ...]

    @property
    def final(self) -> Snapshot:
        """The snapshot the story ends in."""
        return self.snapshots[-1]


def stories(
    machine: Machine,
    payloads: Mapping[str, st.SearchStrategy[Mapping[str, Any]]] | None = None,
    *,
    input: Any = None,
    outputs: OutputStrategies | None = None,
    errors: Mapping[str, Sequence[str]] | None = None,
    max_steps: int = 20,
    fire_timers: bool = True,
    calls_first: bool = False,
) -> st.SearchStrategy[Story]:
    """Stories of a run of ``machine`` started with ``input``: up to ``max_steps`` steps,
    each an event of the alphabet, an outcome of a running call or the next timer.
    ``calls_first``: while a call runs, its outcome (the earliest started call's) comes
    next, as on a runtime that executes calls as soon as they start (the durable one)."""
    check_outputs(machine, outputs, errors)
    alphabet = [e["type"] for e in event_alphabet(machine)]
    sent = event(machine, payloads) if alphabet else None

    @st.composite
    def draw_story(draw: st.DrawFn) -> Story:
        now = 0
        snapshot, _ = machine.initial_transition(input, now)
        events_: list[FrozenDict] = []
        snapshots, times = [snapshot], [now]
        length = draw(st.integers(0, max_steps))  # shrinks towards shorter stories
        for _ in range(length):
            if snapshot.status != "active":
                break
            calls = running_calls(machine, snapshot)
            kinds = []
            if calls:
                kinds.append("call")
            if not (calls_first and calls):
                if sent is not None:
                    kinds.append("event")
                if fire_timers and snapshot.timers:
                    kinds.append("timer")
            if not kinds:
                break
            kind = draw(st.sampled_from(kinds))
            if kind == "timer":
                timer = snapshot.timers[0]
                now = max(now, timer.due_at)
                item = FrozenDict({**timer.event, "timer": timer.id})
                snapshot, _ = machine.fire_timer(snapshot, timer.id, now)
            else:
                if kind == "call":
                    call = calls[0] if calls_first else draw(st.sampled_from(calls))
                    item = draw(outcome_strategy(machine, call, outputs, errors))
                else:
                    assert sent is not None
                    item = draw(sent)
                try:
                    snapshot, _ = machine.transition(snapshot, item, now)
                except ContextError:  # a value no store holds: the story ends with the event
                    events_.append(item)  # that produced it, for the check to report it
                    snapshots.append(snapshot)
                    times.append(now)
                    break
            events_.append(item)
            snapshots.append(snapshot)
            times.append(now)
        return Story(tuple(events_), tuple(snapshots), tuple(times))

    return draw_story()


def reachable_snapshots(
    machine: Machine,
    payloads: Mapping[str, st.SearchStrategy[Mapping[str, Any]]] | None = None,
    *,
    max_steps: int = 20,
    input: Any = None,
    types: Sequence[str] | None = None,
    outputs: OutputStrategies | None = None,
    errors: Mapping[str, Sequence[str]] | None = None,
) -> st.SearchStrategy[Snapshot]:
    """Snapshots reached by stories of up to ``max_steps`` steps from the initial snapshot
    (with ``types``: by lists of those events only, as before stories existed)."""
    if types is not None:
        return events(machine, payloads, types=types, max_size=max_steps).map(
            lambda sequence: run_events(machine, sequence, input)
        )
    return stories(
        machine, payloads, input=input, outputs=outputs, errors=errors, max_steps=max_steps
    ).map(lambda story: story.final)


# -- random machines -------------------------------------------------------------------------


def _even(context: Mapping[str, Any], event: Any) -> bool:
    return bool(context["n"] % 2 == 0)


def _odd(context: Mapping[str, Any], event: Any) -> bool:
    return bool(context["n"] % 2 == 1)


def _small(context: Mapping[str, Any], event: Any) -> bool:
    return bool(context["n"] < 2)


def _next(context: Mapping[str, Any], event: Any) -> int:
    return (int(context["n"]) + 1) % 4


GUARDS = {"even": _even, "odd": _odd, "small": _small}
"""The guards generated machines use: all read ``context["n"]`` (0..3)."""
ACTIONS = {"inc": assign({"n": _next}), "reset": assign({"n": 0})}
"""The actions generated machines use: ``inc`` is n = (n + 1) % 4, ``reset`` is n = 0."""
EVENTS = ("E0", "E1", "E2", "E3")


@dataclass(frozen=True)
class GeneratedMachine:
    """A random machine: a JSON config plus the names of its implementations."""

    config: Mapping[str, Any]
    event_types: tuple[str, ...] = EVENTS
    guards: Mapping[str, Any] = field(default_factory=lambda: dict(GUARDS), repr=False)
    actions: Mapping[str, Any] = field(default_factory=lambda: dict(ACTIONS), repr=False)

    def build(self, extra_actions: Mapping[str, Any] | None = None) -> Machine:
        """The machine (``extra_actions`` adds implementations, e.g. for logging)."""
        return create_machine(
            self.config, guards=self.guards, actions={**self.actions, **(extra_actions or {})}
        )

    def to_json(self) -> str:
        """The config as indented JSON (what a failure report shows)."""
        return orjson.dumps(self.config, option=orjson.OPT_INDENT_2).decode()

    def __repr__(self) -> str:
        return f"GeneratedMachine({self.to_json()})"


@dataclass
class _Node:
    key: str
    kind: str  # atomic | compound | parallel | final | history
    parent: _Node | None
    children: list[_Node] = field(default_factory=list)
    history: str = "shallow"
    history_target: str | None = None
    config: dict[str, Any] = field(default_factory=dict)

    def path(self) -> list[str]:
        node: _Node | None = self
        keys: list[str] = []
        while node is not None and node.parent is not None:
            keys.append(node.key)
            node = node.parent
        return list(reversed(keys))

    def walk(self) -> list[_Node]:
        found = [self]
        for child in self.children:
            found += child.walk()
        return found

    def is_descendant_of(self, other: _Node) -> bool:
        node = self.parent
        while node is not None:
            if node is other:
                return True
            node = node.parent
        return False


@dataclass(frozen=True)
class _Options:
    max_states: int
    max_depth: int
    parallel: bool
    history: bool
    final: bool
    eventless: bool
    guards: bool
    actions: bool
    root_transitions: bool
    max_transitions: int
    events: tuple[str, ...]


def machines(
    *,
    max_states: int = 10,
    max_depth: int = 3,
    parallel: bool = True,
    history: bool = True,
    final: bool = True,
    eventless: bool = True,
    guards: bool = True,
    actions: bool = True,
    root_transitions: bool = True,
    max_transitions: int = 3,
    events: Sequence[str] = EVENTS,
) -> st.SearchStrategy[GeneratedMachine]:
    """Random valid statecharts (see module docs). State keys are ``s1``, ``s2``, ... in
    document order and unique in the whole machine; the machine id is ``m``; the context is
    ``{"n": 0}``, read by the guards ``even``/``odd``/``small`` and changed by the actions
    ``inc``/``reset``. Each flag turns a feature off when False."""
    options = _Options(
        max_states,
        max_depth,
        parallel,
        history,
        final,
        eventless,
        guards,
        actions,
        root_transitions,
        max_transitions,
        tuple(events),
    )
    return _machine(options)


@st.composite
def _machine(draw: st.DrawFn, options: _Options) -> GeneratedMachine:
    root = _Node("m", "compound", None)
    counter = [0]
    _draw_children(draw, root, 1, options, counter)
    nodes = root.walk()
    for node in nodes:
        _draw_behaviour(draw, node, nodes, options)
    return GeneratedMachine(_emit(root), options.events)


def _new_key(counter: list[int]) -> str:
    counter[0] += 1
    return f"s{counter[0]}"


def _draw_children(
    draw: st.DrawFn, parent: _Node, depth: int, options: _Options, counter: list[int]
) -> None:
    is_region_parent = parent.kind == "parallel"
    count = draw(st.integers(2, 3)) if is_region_parent else draw(st.integers(1, 3))
    for index in range(count):
        if counter[0] >= options.max_states and parent.children:
            break
        kinds = ["atomic"]
        if depth < options.max_depth and counter[0] < options.max_states - 1:
            kinds.append("compound")
            if options.parallel and not is_region_parent:
                kinds.append("parallel")
        if options.final and index > 0 and not is_region_parent:
            kinds.append("final")
        if is_region_parent and "compound" in kinds:
            kinds = ["compound", "atomic"]  # regions are mostly compound, so they can finish
        kind = draw(st.sampled_from(kinds))
        child = _Node(_new_key(counter), kind, parent)
        parent.children.append(child)
        if kind in ("compound", "parallel"):
            _draw_children(draw, child, depth + 1, options, counter)
    if (
        options.history
        and parent.kind == "compound"
        and parent.parent is not None
        and draw(st.integers(0, 3)) == 0
    ):
        history = _Node(_new_key(counter), "history", parent)
        history.history = draw(st.sampled_from(["shallow", "deep"]))
        choices = [c.key for c in parent.children if c.kind != "final"]
        if draw(st.booleans()):
            history.history_target = draw(st.sampled_from(choices))
        parent.children.append(history)


def _draw_behaviour(draw: st.DrawFn, node: _Node, nodes: list[_Node], options: _Options) -> None:
    if node.kind in ("final", "history"):
        return
    order = {n.key: i for i, n in enumerate(nodes)}
    targets = [n for n in nodes if n.parent is not None]
    config = node.config
    if node.parent is not None or options.root_transitions:
        on: dict[str, list[dict[str, Any]]] = {}
        for _ in range(draw(st.integers(0, options.max_transitions))):
            kind = draw(st.sampled_from(options.events))
            on.setdefault(kind, []).append(_draw_transition(draw, node, targets, options))
        if on:
            config["on"] = on
    if options.eventless and node.kind == "atomic" and draw(st.integers(0, 3)) == 0:
        # later in document order and in no parallel state shared with the source: each
        # eventless step then only enters later states, so eventless steps alone terminate
        later = [
            n
            for n in targets
            if order[n.key] > order[node.key]
            and n.kind != "history"
            and not _share_parallel(node, n)
        ]
        if later:
            transition = _draw_transition(draw, node, later, options, targetless=False)
            config["always"] = [transition]
    can_finish = (
        any(c.kind == "final" for c in node.children)
        if node.kind == "compound"
        else node.kind == "parallel"
        and all(any(c.kind == "final" for c in r.children) for r in node.children)
    )
    if can_finish and node.parent is not None and draw(st.booleans()):
        # done events only lead forward too (after this subtree, no shared parallel state)
        end = max(order[n.key] for n in node.walk())
        after = [
            n
            for n in targets
            if order[n.key] > end and n.kind != "history" and not _share_parallel(node, n)
        ]
        config["onDone"] = (
            _draw_transition(draw, node, after, options)
            if after
            else _draw_transition(draw, node, [], options)
        )
    if options.actions and node.parent is not None:
        for key in ("entry", "exit"):
            names = draw(st.lists(st.sampled_from(sorted(ACTIONS)), max_size=1))
            if names:
                config[key] = names


def _share_parallel(a: _Node, b: _Node) -> bool:
    ancestor = a.parent
    while ancestor is not None:
        if ancestor.kind == "parallel" and b.is_descendant_of(ancestor):
            return True
        ancestor = ancestor.parent
    return False


def _draw_transition(
    draw: st.DrawFn, node: _Node, targets: list[_Node], options: _Options, targetless: bool = True
) -> dict[str, Any]:
    transition: dict[str, Any] = {}
    choices: list[_Node | None] = [None, *targets] if targetless else list(targets)
    target = draw(st.sampled_from(choices))
    if target is not None:
        transition["target"] = "#" + ".".join(["m", *target.path()])
        if draw(st.integers(0, 3)) == 0:
            transition["reenter"] = True
    if options.guards and draw(st.booleans()):
        transition["guard"] = draw(st.sampled_from(sorted(GUARDS)))
    if options.actions:
        names = draw(st.lists(st.sampled_from(sorted(ACTIONS)), max_size=2))
        if names:
            transition["actions"] = names
    return transition


def _emit(node: _Node) -> dict[str, Any]:
    config: dict[str, Any] = {"id": "m", "context": {"n": 0}} if node.parent is None else {}
    if node.kind in ("parallel", "final", "history"):
        config["type"] = node.kind
    if node.kind == "history":
        config["history"] = node.history
        if node.history_target is not None:
            config["target"] = node.history_target
        return config
    if node.kind == "compound":
        config["initial"] = node.children[0].key
    if node.children:
        config["states"] = {c.key: _emit(c) for c in node.children}
    config.update(node.config)
    return config
