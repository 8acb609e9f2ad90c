"""Ready-made properties, one line each:

    assert_deterministic(machine)              # same story, same snapshots and effects
    assert_persistence_invisible(machine)      # persist -> JSON bytes -> restore changes nothing
    assert_no_deadlock(machine)                # no active state that nothing leaves
    assert_all_states_reachable(machine)       # every state is active somewhere
    assert_final_always_reachable(machine)     # from everywhere, a final state can be reached
    assert_error_paths_reachable(machine)      # every error transition is taken somewhere
    assert_retries_bounded(machine)            # each retry policy reaches its attempts, no more
    assert_no_done_through_failure(machine)    # no run ends done in a failure final state
    assert_context_invariants(machine, invariants={...})   # per-state checks, everywhere

or ``assert_properties(machine, "determinism", "no_deadlock", ...)``. Every one takes
``input=`` (the run's input) and, for workflows, ``outputs=`` (per actor name) and ``errors=``
(extra error names per actor name): the harness completes and fails invoked calls and fires
timers itself (see ``outcomes``). A failure raises ``PropertyViolation`` (an
``AssertionError``) whose message shows the counterexample as a story and whose ``events``
holds it. The first two draw stories with Hypothesis and report the *shrunk* one; the others
explore the state space (``graph.explore``) and report a shortest path, minimal by
construction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import ContextError
from ..events import EventLike, normalize_event
from ..frozen import thaw
from ..machine import Machine, Result
from ..nodes import FINAL
from ..retrying import retry_steps
from ..snapshot import Snapshot, persist, snapshot_to_json
from .coverage import CoverageRecorder, state_name
from .graph import EventSource, Graph, StateKey, explore
from .harness import Check, collect_invariants
from .hypothesis_api import HealthCheck, given, settings
from .outcomes import outcome_call
from .strategies import OutputStrategies, stories


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
    payload = {k: v for k, v in event.items() if k not in ("type", "timer")}
    text = f"{event['type']} {payload}" if payload else str(event["type"])
    return f"(timer) {text}" if "timer" in event else text


def _hypothesis_settings(max_examples: int) -> settings:
    return settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


def _run_stories(
    check: Callable[[list[Any]], None],
    machine: Machine,
    payloads: Mapping[str, Any] | None,
    max_steps: int,
    max_examples: int,
    input: Any,
    outputs: OutputStrategies | None,
    errors: Mapping[str, Sequence[str]] | None,
) -> None:
    strategy = stories(
        machine, payloads, input=input, outputs=outputs, errors=errors, max_steps=max_steps
    )

    @_hypothesis_settings(max_examples)
    @given(story=strategy)
    def run(story: Any) -> None:
        check(list(story.events))

    run()


def apply(machine: Machine, snapshot: Snapshot, item: EventLike, now: int) -> tuple[Result, int]:
    """One step of a story: fire the timer an item marked ``timer`` names (the clock jumps to
    its due time) or deliver the event at ``now``; returns the result and the new time."""
    event = normalize_event(item)
    timer = event.get("timer")
    if timer is not None:
        due = next((t.due_at for t in snapshot.timers if t.id == timer), now)
        now = max(now, due)
        return machine.fire_timer(snapshot, str(timer), now), now
    return machine.transition(snapshot, event, now), now


def _fingerprint(snapshot: Snapshot, effects: Sequence[Any]) -> tuple[Any, Any]:
    return machine_persist(snapshot), [e.to_json() for e in effects]


def machine_persist(snapshot: Snapshot) -> dict[str, Any]:
    """The persisted form of ``snapshot`` (what the properties compare)."""
    return persist(snapshot)


def deterministic_on(
    machine: Machine, sequence: Sequence[EventLike], input: Any = None, twin: Machine | None = None
) -> None:
    """Raise ``PropertyViolation`` unless the story ``sequence`` gives the same snapshots and
    effects on ``machine`` and on a separately built twin computing every transition plan
    afresh."""
    twin = twin or Machine(
        machine.config, machine.implementations, machine.version, machine.migrations
    )
    twin.plans = False
    first, first_effects = machine.initial_transition(input)
    second, second_effects = twin.initial_transition(input)
    _same("determinism", first, first_effects, second, second_effects, [])
    now = twin_now = 0
    for index, item in enumerate(sequence):
        (first, first_effects), now = apply(machine, first, item, now)
        (second, second_effects), twin_now = apply(twin, second, item, twin_now)
        _same("determinism", first, first_effects, second, second_effects, sequence[: index + 1])


def assert_deterministic(
    machine: Machine,
    *,
    payloads: Mapping[str, Any] | None = None,
    max_steps: int = 20,
    max_examples: int = 100,
    input: Any = None,
    outputs: OutputStrategies | None = None,
    errors: Mapping[str, Sequence[str]] | None = None,
) -> None:
    """The same story gives the same snapshots and effects: on a second, separately built
    machine that computes every transition plan afresh. Catches guards, assigns or context
    factories that read clocks, randomness or global state."""
    twin = Machine(machine.config, machine.implementations, machine.version, machine.migrations)
    _run_stories(
        lambda sequence: deterministic_on(machine, sequence, input, twin),
        machine,
        payloads,
        max_steps,
        max_examples,
        input,
        outputs,
        errors,
    )


def _same(
    prop: str,
    a: Snapshot,
    a_effects: Sequence[Any],
    b: Snapshot,
    b_effects: Sequence[Any],
    sequence: Sequence[Any],
) -> None:
    left, right = _fingerprint(a, a_effects), _fingerprint(b, b_effects)
    if left != right:
        what = "snapshots" if left[0] != right[0] else "effects"
        raise PropertyViolation(
            prop,
            f"the same events gave different {what}:\n"
            f"    {left[0 if what == 'snapshots' else 1]}\n"
            f"    {right[0 if what == 'snapshots' else 1]}",
            sequence,
        )


def persistence_invisible_on(
    machine: Machine, sequence: Sequence[EventLike], input: Any = None
) -> None:
    """Raise ``PropertyViolation`` unless persisting to JSON bytes and restoring before every
    step of the story ``sequence`` leaves the snapshots and effects unchanged."""

    def roundtrip(snapshot: Snapshot, done: Sequence[Any]) -> Snapshot:
        try:
            return machine.restore(snapshot_to_json(snapshot))
        except Exception as exc:  # orjson or restore: either way the snapshot did not survive
            raise PropertyViolation("persistence", f"persisting failed: {exc!r}", done) from exc

    straight, _ = machine.initial_transition(input)
    stored = roundtrip(straight, [])
    _same("persistence", straight, (), stored, (), [])
    now = 0
    for index, item in enumerate(sequence):
        try:
            (straight, straight_effects), after = apply(machine, straight, item, now)
        except ContextError as exc:  # a value no store holds, refused where it entered
            raise PropertyViolation(
                "persistence", f"persisting failed: {exc!r}", sequence[: index + 1]
            ) from exc
        stored = roundtrip(stored, sequence[:index])
        (stored, stored_effects), _ = apply(machine, stored, item, now)
        now = after
        _same(
            "persistence", straight, straight_effects, stored, stored_effects, sequence[: index + 1]
        )
    roundtrip(stored, sequence)


def assert_persistence_invisible(
    machine: Machine,
    *,
    payloads: Mapping[str, Any] | None = None,
    max_steps: int = 20,
    max_examples: int = 100,
    input: Any = None,
    outputs: OutputStrategies | None = None,
    errors: Mapping[str, Sequence[str]] | None = None,
) -> None:
    """Persisting a snapshot to JSON bytes and restoring it, before every step of a story
    (events, invoke outcomes, timers), changes neither the snapshots nor the effects."""
    _run_stories(
        lambda sequence: persistence_invisible_on(machine, sequence, input),
        machine,
        payloads,
        max_steps,
        max_examples,
        input,
        outputs,
        errors,
    )


def _explored(machine: Machine, events: EventSource, options: Mapping[str, Any]) -> list[Graph]:
    """The explorations a property looks at: ``graphs=`` (or ``graph=``) as given, else one
    per input of ``inputs=`` (or one from ``input=``), with the other ``explore`` options."""
    if options.get("graphs") is not None:
        return list(options["graphs"])
    if isinstance(options.get("graph"), Graph):
        return [options["graph"]]
    rest = {k: v for k, v in options.items() if k not in ("graph", "graphs", "inputs")}
    if "inputs" in options:
        rest.pop("input", None)
        return [explore(machine, events, input=given, **rest) for given in options["inputs"]]
    return [explore(machine, events, **rest)]


def assert_no_deadlock(
    machine: Machine, events: EventSource = None, **explore_options: Any
) -> None:
    """No reachable active (non-final) state is a trap: some event, call outcome or pending
    timer leads to a different state. ``events`` and the options are those of
    ``graph.explore`` (``input``, ``outputs``, ``errors``, bounds); ``inputs=[...]`` explores
    from each; ``graph=``/``graphs=`` reuse explorations."""
    for graph in _explored(machine, events, explore_options):
        outgoing = graph.outgoing()
        for key, snapshot in graph.states.items():
            if snapshot.status != "active":
                continue
            exits = [e for e in outgoing.get(key, []) if e.target != key]
            if not exits and key in graph.expanded:
                path = graph.path_to(key)
                raise PropertyViolation(
                    "no deadlock",
                    f"state {thaw(snapshot.value)!r} with "
                    f"context {thaw(snapshot.context)!r} is not final and "
                    "nothing leaves it",
                    path.events,
                )


def _coverage(machine: Machine, graphs: Sequence[Graph]) -> Any:
    recorder = CoverageRecorder(machine)
    for graph in graphs:
        recorder.merge(graph.recorder)
    return recorder.report()


def _bound(graphs: Sequence[Graph]) -> str:
    return (
        " (exploration hit its bounds; raise max_states/max_depth)"
        if any(g.truncated for g in graphs)
        else ""
    )


def assert_all_states_reachable(
    machine: Machine, events: EventSource = None, **explore_options: Any
) -> None:
    """Every state of the machine is active in some reachable snapshot (states entered and
    left within one macrostep count), from one of the inputs."""
    graphs = _explored(machine, events, explore_options)
    missing = _coverage(machine, graphs).unreached_states
    if missing:
        raise PropertyViolation(
            "every state reachable", f"never active: {', '.join(missing)}{_bound(graphs)}"
        )


def assert_final_always_reachable(
    machine: Machine,
    events: EventSource = None,
    *,
    ends: Sequence[str] = ("done",),
    **explore_options: Any,
) -> None:
    """From every reachable state some path leads to a final state: a ``done`` snapshot, or a
    final state declared a failure (which ends the run as an ``error``). No run can get
    stuck, and none can only end by an unhandled error. ``ends=("done", "error")`` accepts
    any failure too. States beyond the exploration bounds count as possibly reaching one."""
    failures = _failure_finals(machine)
    for graph in _explored(machine, events, explore_options):
        _final_reachable_in(graph, ends, failures)


def _final_reachable_in(graph: Graph, ends: Sequence[str], failures: Mapping[str, Any]) -> None:
    outgoing = graph.outgoing()
    good: set[StateKey] = {
        k
        for k, s in graph.states.items()
        if s.status in ends or (s.status == "error" and any(s.matches(p) for p in failures))
    }
    # beyond the bounds nothing is known: count unexplored successors as good
    good |= {k for k, edges in outgoing.items() if any(e.target not in graph.states for e in edges)}
    good |= {k for k, s in graph.states.items() if s.status == "active" and k not in graph.expanded}
    changed = True
    while changed:
        changed = False
        for key, edges in outgoing.items():
            if key not in good and any(e.target in good for e in edges):
                good.add(key)
                changed = True
    for key, snapshot in graph.states.items():
        if key not in good and snapshot.status == "active":
            path = graph.path_to(key)
            raise PropertyViolation(
                "final state always reachable",
                f"from state {thaw(snapshot.value)!r} with context "
                f"{thaw(snapshot.context)!r} no final state can be reached",
                path.events,
            )


def assert_error_paths_reachable(
    machine: Machine, events: EventSource = None, **explore_options: Any
) -> None:
    """Every declared error path is taken somewhere: each transition on an invoke's error
    (``onError``, a retry's wait, its exhaustion) is taken in some explored story. An
    error path nothing can reach is untested code that a reviewer believes protects the run."""
    graphs = _explored(machine, events, explore_options)
    missing = [
        t
        for t in _coverage(machine, graphs).untaken_transitions
        if ".xstate.error.actor." in t or ".onError[" in t
    ]
    if missing:
        raise PropertyViolation(
            "every error path reachable", f"never taken: {', '.join(missing)}{_bound(graphs)}"
        )


def assert_retries_bounded(
    machine: Machine, events: EventSource = None, **explore_options: Any
) -> None:
    """Every retry policy's attempt count is reached and never exceeded: some story makes
    ``max_attempts`` attempts (unless a ``total_timeout`` ends it sooner), none makes more, and
    after the last one a retryable failure leaves the retried state instead of waiting."""
    graphs = _explored(machine, events, explore_options)
    for node in (n for n in machine.definition.nodes if n.retry is not None):
        name, limit = state_name(node), node.retry.max_attempts
        most, exhausted = 0, False
        for graph in graphs:
            most = max(most, _most_attempts(graph, node, name, limit))
            exhausted = exhausted or any(_gives_up(graph, e, node) for e in graph.edges)
        if most < limit and node.retry.total_timeout is None:
            raise PropertyViolation(
                "retries bounded",
                f"state {name!r}: its policy allows "
                f"{limit} attempts but no story made more than {most}"
                f"{_bound(graphs)}",
            )
        if not exhausted:
            raise PropertyViolation(
                "retries bounded",
                f"state {name!r}: no story exhausts "
                f"its retries (a retryable failure of the last attempt "
                f"leading out of it){_bound(graphs)}",
            )


def _most_attempts(graph: Graph, node: Any, name: str, limit: int) -> int:
    """The most attempts any explored snapshot records (raising when beyond ``limit``)."""
    most = 0
    for key, snapshot in graph.states.items():
        record = snapshot.retries.get(node.id)
        if record is None:
            continue
        attempt = int(record["attempt"])
        most = max(most, attempt)
        waiting = snapshot.matches(retry_steps(name)[1])
        if attempt > limit or (waiting and attempt >= limit):
            raise PropertyViolation(
                "retries bounded",
                f"state {name!r}: attempt {attempt} of at most {limit}"
                f"{' and still waiting to retry' if waiting else ''}",
                graph.path_to(key).events,
            )
    return most


def _gives_up(graph: Graph, edge: Any, node: Any) -> bool:
    """An edge where a retryable failure of ``node``'s call ends its retries."""
    event = edge.segment.event
    if outcome_call(event) != node.retry_invoke or "error" not in event:
        return False
    if not node.retry.is_retryable(event["error"]):
        return False
    before = graph.states[edge.source]
    name, after = state_name(node), edge.segment.state
    return before.matches(name) and (after.status != "active" or not after.matches(name))


def _failure_finals(machine: Machine) -> dict[str, Any]:
    """Final states declared failures (``{"type": "final", "failure": true | "reason"}``),
    read from the config as written: path -> the declared value."""
    found: dict[str, Any] = {}
    for node in machine.definition.nodes:
        if node.type != FINAL:
            continue
        config: Any = machine.config
        for key in node.path:
            config = (config.get("states") or {}).get(key) if isinstance(config, Mapping) else None
        if isinstance(config, Mapping) and config.get("failure") not in (None, False):
            found[state_name(node)] = config["failure"]
    return found


def assert_no_done_through_failure(
    machine: Machine, events: EventSource = None, **explore_options: Any
) -> None:
    """No run ends ``done`` through a final state declared a failure: reaching one must end
    the run as an error (status ``error``), so its error workflow starts and the UI shows it
    red."""
    failures = _failure_finals(machine)
    if not failures:
        return
    for graph in _explored(machine, events, explore_options):
        for key, snapshot in graph.states.items():
            reached = [p for p in failures if snapshot.matches(p)]
            if snapshot.status == "done" and reached:
                raise PropertyViolation(
                    "no done through a failure",
                    f"the run ended done in failure state {reached[0]!r}",
                    graph.path_to(key).events,
                )


def assert_context_invariants(
    machine: Machine,
    events: EventSource = None,
    *,
    invariants: Mapping[str, Check | Sequence[Check]] | None = None,
    checks: Mapping[str, Check] | None = None,
    **explore_options: Any,
) -> None:
    """Per-state context invariants (as in ``harness``: ``invariants={"state.path": check}``,
    ``""`` for always, or ``meta.invariants`` names looked up in ``checks``) hold in every
    explored snapshot, not just sampled ones; the counterexample is a shortest story."""
    declared = collect_invariants(machine, invariants, checks)
    if not declared:
        return
    for graph in _explored(machine, events, explore_options):
        for key, snapshot in graph.states.items():
            for item in declared:
                if item.state and not snapshot.matches(item.state):
                    continue
                if not item.check(snapshot.context):
                    where = f"in state {item.state!r}" if item.state else "always"
                    raise PropertyViolation(
                        "context invariants",
                        f"invariant {item.name!r} "
                        f"({where}) failed: value "
                        f"{thaw(snapshot.value)!r}, context "
                        f"{thaw(snapshot.context)!r}",
                        graph.path_to(key).events,
                    )


PROPERTIES: dict[str, Callable[..., None]] = {
    "determinism": assert_deterministic,
    "persistence": assert_persistence_invisible,
    "no_deadlock": assert_no_deadlock,
    "all_states_reachable": assert_all_states_reachable,
    "final_always_reachable": assert_final_always_reachable,
    "error_paths_reachable": assert_error_paths_reachable,
    "retries_bounded": assert_retries_bounded,
    "no_done_through_failure": assert_no_done_through_failure,
}
_SAMPLED = ("determinism", "persistence")
WORKFLOW_PROPERTIES = tuple(PROPERTIES)
"""What ``assert_properties`` checks by default."""


def assert_properties(
    machine: Machine,
    *names: str,
    events: Sequence[EventLike] | None = None,
    payloads: Mapping[str, Any] | None = None,
    input: Any = None,
    inputs: Sequence[Any] | None = None,
    outputs: Mapping[str, Any] | None = None,
    errors: Mapping[str, Sequence[str]] | None = None,
    invariants: Mapping[str, Check | Sequence[Check]] | None = None,
    checks: Mapping[str, Check] | None = None,
    max_examples: int = 100,
    ends: Sequence[str] = ("done",),
    **explore_options: Any,
) -> None:
    """Check the named properties (all of ``PROPERTIES`` when no name is given), plus the
    context invariants when ``invariants``/``checks`` are given. ``ends`` is
    ``final_always_reachable``'s (``("done", "error")`` accepts failing). ``events`` is the list
    exploration sends, ``payloads`` the per-event payload strategies for the sampled ones;
    ``input`` (or several: ``inputs``, for a workflow that routes on its input: reachability
    then counts over all of them), ``outputs`` and ``errors`` as in ``graph.explore``
    (exploration takes the examples of ``outputs``; the sampled properties also take
    strategies). The explored properties share one exploration per input."""
    unknown = [n for n in names if n not in PROPERTIES]
    if unknown:
        raise ValueError(f"unknown properties {unknown}; known: {sorted(PROPERTIES)}")
    chosen = names or tuple(PROPERTIES)
    given = list(inputs) if inputs is not None else [input]
    graphs: list[Graph] = []
    if any(n not in _SAMPLED for n in chosen) or invariants or checks:
        graphs = [
            explore(
                machine,
                events,
                input=one,
                outputs=_examples(outputs),
                errors=errors,
                **explore_options,
            )
            for one in given
        ]
    for name in chosen:
        if name in _SAMPLED:
            for one in given:
                PROPERTIES[name](
                    machine,
                    payloads=payloads,
                    input=one,
                    outputs=outputs,
                    errors=errors,
                    max_examples=max_examples,
                )
        elif name == "final_always_reachable":
            assert_final_always_reachable(machine, graphs=graphs, ends=ends)
        else:
            PROPERTIES[name](machine, graphs=graphs)
    if invariants or checks:
        assert_context_invariants(machine, invariants=invariants, checks=checks, graphs=graphs)


def _examples(outputs: Mapping[str, Any] | None) -> dict[str, list[Any]] | None:
    """The example lists of ``outputs`` (a strategy gives exploration its first example)."""
    if outputs is None:
        return None
    found: dict[str, list[Any]] = {}
    for src, value in outputs.items():
        if hasattr(value, "example") and not isinstance(value, list | tuple):
            raise ValueError(
                f"outputs[{src!r}]: exploration needs a list of example outputs "
                "(strategies are for the sampled properties and the harness)"
            )
        found[src] = list(value)
    return found


__all__ = [
    "PROPERTIES",
    "WORKFLOW_PROPERTIES",
    "PropertyViolation",
    "assert_all_states_reachable",
    "assert_context_invariants",
    "assert_deterministic",
    "assert_error_paths_reachable",
    "assert_final_always_reachable",
    "assert_no_deadlock",
    "assert_no_done_through_failure",
    "assert_persistence_invisible",
    "assert_properties",
    "assert_retries_bounded",
    "deterministic_on",
    "persistence_invisible_on",
]
