"""The run-to-completion algorithm: macrosteps of microsteps, as XState v5 runs them (which
follows the SCXML algorithm; see docs/semantics.md for where they differ).

Read top to bottom next to https://www.w3.org/TR/scxml/#AlgorithmforSCXMLInterpretation:
``macrostep`` -> ``select_transitions`` / ``select_eventless_transitions`` ->
``remove_conflicting_transitions`` -> ``microstep`` (``exit_states``, transition actions,
``enter_states``). Everything here is pure: it changes only the ``Step`` it is given, and user
actions become effects instead of being called.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from msgspec.structs import replace

from . import effects as fx
from . import retrying
from .actions import (
    ActionSpec,
    Assign,
    BuiltinAction,
    Cancel,
    EmitAction,
    ForwardTo,
    LogAction,
    Raise,
    SendParentAction,
    SendToAction,
    SpawnChild,
    StopChild,
)
from .configuration import Configuration, Configurations, in_final_state
from .definition import Definition, Implementations, resolve_action, resolve_actor, resolve_guard
from .errors import ImplementationError, InfiniteLoopError, StatechartError
from .events import done_state_event_type, is_error_actor_event, normalize_event
from .frozen import EMPTY, FrozenDict, freeze, frozen_update
from .limits import MAX_DELAY
from .nodes import COMPOUND, FINAL, HISTORY, PARALLEL, StateNode, Transition
from .snapshot import FINISHED, ChildRef, Snapshot, SnapshotOwner, Timer, finished_child

MAX_MICROSTEPS = 10_000
"""A macrostep that has not settled after this many microsteps is an eventless loop."""


class Step:
    """The working state of one macrostep: what ``Snapshot`` holds, made mutable, plus the
    internal queue and the effects collected so far. Built-in actions act on it."""

    __slots__ = (
        "_children",
        "_timers",
        "base",
        "configuration",
        "configurations",
        "context",
        "definition",
        "effects",
        "error",
        "event",
        "history",
        "implementations",
        "microsteps",
        "nodes",
        "now",
        "output",
        "plans",
        "queue",
        "retries",
        "skipped",
        "status",
        "trace",
    )

    def __init__(
        self,
        definition: Definition,
        implementations: Implementations,
        configurations: Configurations,
        base: Snapshot | None,
        now: Callable[[], int],
        context: FrozenDict = EMPTY,
        trace: list[tuple[FrozenDict, tuple[Transition, ...]]] | None = None,
        plans: bool = True,
    ) -> None:
        self.definition = definition
        self.implementations = implementations
        self.configurations = configurations
        self.base = base  # the snapshot this step starts from (None: the machine starts)
        self.now = now
        self.trace = trace
        self.plans = plans  # False: compute every microstep's plan afresh (the reference)
        self.effects: list[fx.Effect] = []
        self.queue: list[FrozenDict] = []  # short: a list beats a deque here
        self.event: FrozenDict = EMPTY
        self.status = "active"
        self.output: Any = None
        self.error: Any = None
        self.microsteps = 0
        # the timers and children are copied from the snapshot when first changed
        self._timers: dict[str, Timer] | None = None
        self._children: dict[str, ChildRef] | None = None
        if base is None:
            self.configuration: Configuration | None = None
            self.nodes: set[StateNode] | frozenset[StateNode] = set()
            self.context = context
            self.history: Mapping[str, tuple[StateNode, ...]] = EMPTY
            self.retries: FrozenDict = EMPTY
            self.skipped: tuple[Any, ...] = ()
        else:
            # between microsteps ``configuration`` is the interned configuration and
            # ``nodes`` its node set; inside one that observes it, a copy being changed
            self.configuration = base.configuration
            self.nodes = base.configuration.node_set
            self.context = base.context
            self.history = base.history_nodes
            self.retries = base.retry_records
            self.skipped = base.skipped

    @property
    def timers(self) -> dict[str, Timer]:
        """The pending timers, made changeable (the snapshot's stay as they were)."""
        timers = self._timers
        if timers is None:
            timers = self._timers = (
                {t.id: t for t in self.base.timers} if self.base is not None else {}
            )
        return timers

    @property
    def children(self) -> dict[str, ChildRef]:
        """The child actors, made changeable (the snapshot's stay as they were)."""
        children = self._children
        if children is None:
            children = self._children = dict(self.base.children) if self.base is not None else {}
        return children

    def has_timers(self) -> bool:
        return (
            bool(self._timers)
            if self._timers is not None
            else self.base is not None and bool(self.base.timers)
        )

    def has_children(self) -> bool:
        return (
            bool(self._children)
            if self._children is not None
            else self.base is not None and bool(self.base.children)
        )

    def result(self, machine: SnapshotOwner) -> Snapshot:
        """The snapshot this step ends in (parts it did not change shared with the one it
        started from)."""
        configuration = self.configuration
        assert configuration is not None
        base = self.base
        if base is None:
            return Snapshot(
                machine=machine,
                configuration=configuration,
                context=self.context,
                status=self.status,
                output=self.output,
                error=self.error,
                history_nodes=self.history,
                timers=_due_order(self._timers),
                children=FrozenDict(self._children or {}),
                retry_records=self.retries,
                skipped=self.skipped,
            )
        if (
            self._timers is None
            and self._children is None
            and self.status == "active"
            and self.history is base.history_nodes
            and self.retries is base.retry_records
            and self.skipped is base.skipped
        ):
            if configuration is base.configuration and self.context is base.context:
                return base
            return replace(base, configuration=configuration, context=self.context)
        return replace(
            base,
            configuration=configuration,
            context=self.context,
            status=self.status,
            output=self.output,
            error=self.error,
            history_nodes=self.history,
            timers=base.timers if self._timers is None else _due_order(self._timers),
            children=base.children if self._children is None else FrozenDict(self._children),
            retry_records=self.retries,
            skipped=self.skipped,
        )

    # -- what built-in actions may do (statecharts.actions.ActionScope) ---------------------

    def effect(self, effect: fx.Effect) -> None:
        self.effects.append(effect)

    def assign(self, changes: Mapping[str, Any]) -> None:
        self.context = frozen_update(self.context, changes)

    def raise_internal(self, event: FrozenDict) -> None:
        self.queue.append(event)

    def schedule(self, timer_id: str, event: FrozenDict, delay: Any, target: str | None) -> None:
        ms = self.delay_ms(delay)
        due_at = self.now() + ms
        self.timers[timer_id] = Timer(timer_id, event, due_at, target)
        self.effects.append(fx.StartTimer(timer_id, event, ms, due_at, target))

    def cancel(self, timer_id: str) -> None:
        if self.has_timers() and self.timers.pop(timer_id, None) is not None:
            self.effects.append(fx.CancelTimer(timer_id))

    def spawn(
        self,
        actor_id: str | None,
        src: Any,
        input: Any,
        system_id: str | None,
        invoked_by: str | None = None,
        logic: Any = None,
        key: str | None = None,
        attempt: int = 1,
        *,
        sync_snapshot: bool = False,
    ) -> None:
        if logic is None:
            name, logic = resolve_actor(self.implementations, src)
        else:
            name = src
        if actor_id is None:
            n = 0
            while f"{name}#{n}" in self.children:
                n += 1
            actor_id = f"{name}#{n}"
        frozen_input = freeze(input, "input")
        self.children[actor_id] = ChildRef(actor_id, name, system_id, invoked_by, frozen_input)
        self.effects.append(
            fx.StartChild(
                actor_id,
                name,
                frozen_input,
                system_id,
                invoked_by,
                key,
                attempt,
                logic,
                sync_snapshot,
            )
        )

    def stop_child(self, actor_id: str) -> None:
        if self.has_children() and self.children.pop(actor_id, None) is not None:
            for index, effect in enumerate(self.effects):
                if isinstance(effect, fx.StartChild) and effect.id == actor_id:
                    # started and left in the same macrostep: XState starts invocations at
                    # the end of the macrostep, so this one never starts
                    del self.effects[index]
                    return
            self.effects.append(fx.StopChild(actor_id))

    def in_state(self, state_id: str) -> bool:
        node = self.definition.by_id.get(state_id)
        return node is not None and node in self.nodes

    def check(self, guard: Any) -> bool:
        spec = resolve_guard(self.definition, self.implementations, guard)
        return spec.evaluate(self.context, self.event, self)

    def run_actions(self, actions: list[Any]) -> None:
        run_actions(
            self,
            [_action_spec(self.definition, self.implementations, a) for a in actions],
            self.event,
        )

    def delay_ms(self, delay: Any) -> int:
        """Milliseconds for ``delay``: a number, a name from ``delays=``, a function, or a
        retried call's next wait (a delay the definition names, ``retrying.wait``)."""
        name = delay if isinstance(delay, str) else getattr(delay, "__name__", "delay")
        value = delay
        retried = self.definition.retry_delays.get(delay) if isinstance(delay, str) else None
        if retried is not None:
            return retrying.wait(self, retried)
        if isinstance(delay, str):
            if delay not in self.implementations.delays:
                raise ImplementationError(f"delay {delay!r}", LookupError("no such delay"))
            value = self.implementations.delays[delay]
        if callable(value):
            try:
                value = value(self.context, self.event)
            except Exception as exc:
                raise ImplementationError(f"delay {name!r}", exc) from exc
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise ImplementationError(
                f"delay {name!r}",
                ValueError(f"a delay is a non-negative number of milliseconds, not {value!r}"),
            )
        if value > MAX_DELAY:  # its due time must still persist as a JSON integer
            raise ImplementationError(
                f"delay {name!r}", ValueError(f"a delay is at most {MAX_DELAY} ms, not {value!r}")
            )
        return int(value)


def _action_spec(
    definition: Definition, implementations: Implementations, action: Any
) -> ActionSpec:
    """An action given at run time (``enqueue`` in ``enqueue_actions``), resolved."""
    if isinstance(action, ActionSpec):
        return action
    if isinstance(action, BuiltinAction):
        return ActionSpec(action.type, None, action)
    return resolve_action(definition, implementations, action)


# -- the macrostep ---------------------------------------------------------------------------


def macrostep(step: Step, event: FrozenDict) -> None:
    """Process one external event to completion: its microstep, then eventless transitions and
    internal events until the machine is at rest."""
    if event["type"].startswith(_ACTOR_RESULTS):
        _forget_finished_child(step, event)
    transitions = select_transitions(step, event)
    if not transitions and is_error_actor_event(event):
        step.status = "error"  # an unhandled actor error fails the machine, as in XState
        step.error = event.get("error")
        _stop_everything(step)
        return
    microstep(step, transitions, event)
    if step.queue or step.status != "active" or step.configuration.has_always:  # type: ignore[union-attr]
        settle(step, event)


def settle(step: Step, event: FrozenDict, select_eventless: bool = True) -> None:
    """Take eventless transitions and internal events until none is left."""
    count = 0
    while step.status == "active":
        transitions = select_eventless_transitions(step, event) if select_eventless else []
        eventless = bool(transitions)
        if not transitions:
            if not step.queue:
                break
            event = step.queue.pop(0)
            _forget_finished_child(step, event)
            transitions = select_transitions(step, event)
        changed = microstep(step, transitions, event)
        # an eventless microstep that changed nothing would select itself forever
        select_eventless = changed or not eventless
        count += 1
        if count > MAX_MICROSTEPS:
            active = ", ".join(sorted(n.id for n in step.nodes if n.is_atomic))
            raise InfiniteLoopError(
                f"the machine did not settle after {MAX_MICROSTEPS} "
                f"microsteps (eventless transitions or raised events loop "
                f"in: {active})"
            )
    if step.status != "active":
        _stop_everything(step)


_ACTOR_RESULTS = ("xstate.done.actor.", "xstate.error.actor.")


def _forget_finished_child(step: Step, event: FrozenDict) -> None:
    """Mark the child a done/error event comes from as finished; XState keeps it in
    ``snapshot.children`` until its invoking state is exited (or it is stopped)."""
    kind = event["type"]
    if kind.startswith(_ACTOR_RESULTS) and step.has_children():
        child_id = kind.split(".", 3)[3]
        ref = step.children.get(child_id)
        if ref is not None and finished_child(ref) is None:
            outcome = "done" if kind.startswith("xstate.done.") else "error"
            step.children[child_id] = replace(ref, state=FrozenDict({FINISHED: outcome}))


def _stop_everything(step: Step) -> None:
    if step.has_children():
        for actor_id in list(step.children):
            step.stop_child(actor_id)
    if step.has_timers():
        for timer_id in list(step.timers):
            step.cancel(timer_id)


# -- selecting transitions -------------------------------------------------------------------


def select_transitions(step: Step, event: FrozenDict) -> list[Transition]:
    """XState's selection: walk the active tree; the innermost enabled transition wins, and a
    state's own transitions are tried only when none of its active descendants took the
    event. In a parallel state every region contributes."""
    configuration = step.configuration
    if configuration is not None and configuration.chain is not None:
        chosen = first_enabled(configuration.chain_candidates(event["type"]), step, event)
        return [chosen] if chosen is not None else []
    found: list[Transition] = []
    select_in(
        step.definition.root,
        step.nodes,
        event["type"],
        lambda candidates: first_enabled(candidates, step, event),
        found,
    )
    return found


def select_in(
    node: StateNode,
    nodes: AbstractSet[StateNode],
    kind: str,
    choose: Callable[[tuple[Transition, ...]], Transition | None],
    found: list[Transition],
) -> bool:
    took = False
    if node.type == PARALLEL:
        for region in node.regions:
            if region in nodes and select_in(region, nodes, kind, choose, found):
                took = True
    elif node.type == COMPOUND:
        for child in node.children:
            if child in nodes:
                took = select_in(child, nodes, kind, choose, found)
                break
    if took:
        return True
    transition = choose(node.candidates(kind))
    if transition is not None:
        found.append(transition)
        return True
    return False


def first_enabled(
    candidates: Iterable[Transition], step: Step, event: FrozenDict
) -> Transition | None:
    """The first candidate, in priority order, whose guard passes."""
    for transition in candidates:
        guard = transition.guard
        if guard is None:
            return transition
        try:
            test = transition.guard_fn
            if (
                test(step.context, event)
                if test is not None
                else guard.evaluate(step.context, event, step)
            ):
                return transition
        except ImplementationError as exc:
            raise ImplementationError(
                f"{exc.where} at {transition.config_path}", exc.cause
            ) from exc
        except Exception as exc:  # a user guard called directly failed
            raise ImplementationError(
                f"guard '{guard.type}' at {transition.config_path}", exc
            ) from exc
    return None


def select_eventless_transitions(step: Step, event: FrozenDict) -> list[Transition]:
    """For each atomic state (document order), the first enabled ``always`` transition of it
    or its nearest ancestor that has one; conflicts removed."""
    if step.configuration is not None and not step.configuration.has_always:
        return []
    enabled: list[Transition] = []
    for atomic in sorted((n for n in step.nodes if n.is_atomic), key=_order):
        for state in (atomic, *atomic.ancestors):
            if not state.always:
                continue
            transition = first_enabled(state.always, step, event)
            if transition is not None:
                if transition not in enabled:
                    enabled.append(transition)
                break
    return remove_conflicting_transitions(enabled, step.nodes, step.history)


def remove_conflicting_transitions(
    transitions: list[Transition],
    nodes: AbstractSet[StateNode],
    history: Mapping[str, tuple[StateNode, ...]],
) -> list[Transition]:
    """SCXML's conflict rule: of two transitions that would exit a common state, the one from
    the descendant source wins, else the earlier one."""
    if len(transitions) < 2:
        return transitions
    kept: list[Transition] = []
    for t1 in transitions:
        exits1 = set(compute_exit_set([t1], nodes, history))
        preempted = False
        beaten: list[Transition] = []
        for t2 in kept:
            if exits1 & set(compute_exit_set([t2], nodes, history)):
                if t1.source.is_descendant_of(t2.source):
                    beaten.append(t2)
                else:
                    preempted = True
                    break
        if not preempted:
            kept = [t for t in kept if t not in beaten]
            kept.append(t1)
    return kept


# -- the microstep ---------------------------------------------------------------------------


def microstep(step: Step, transitions: list[Transition], event: FrozenDict) -> bool:
    """Take ``transitions`` together: exit, transition actions, enter, as their plan says.
    Returns whether the configuration, context or history changed."""
    if not transitions:
        return False
    step.microsteps += 1
    plan = (
        step.configuration.plans.get(  # type: ignore[union-attr]
            transitions[0] if len(transitions) == 1 else tuple(transitions)
        )
        if step.plans
        else None
    )
    if plan is None:
        plan = plan_for(step, transitions)
    if step.trace is not None:
        step.trace.append((event, plan.transitions))
    # identity, not equality: an assign always makes a new context, and XState re-selects
    # eventless transitions after any assign even when the values are equal
    context, history, retries = step.context, step.history, step.retries
    run_plan(step, plan, event)
    if plan.targetless:
        return step.context is not context
    if step.status == "done":
        _exit_all_if_done(step, event)
    return (
        bool(plan.exits or plan.entries)
        or step.context is not context
        or step.history is not history
        or step.retries is not retries
    )


class Plan:
    """What a microstep does, given the configuration and the transitions it takes: the
    transitions left after conflicts, the states exited (innermost first) and the history
    they record, the states entered (document order), and the configuration reached.

    None of it depends on context or event data, so a plan is computed once by the functions
    below (SCXML's exit and entry sets) and kept on its configuration; guards and action
    bodies still run every time. Plans that go through a history state are computed afresh
    each time (where they lead depends on what the history holds)."""

    __slots__ = (
        "entries",
        "exits",
        "observes_nodes",
        "reads_history",
        "recorded",
        "remaining",
        "target",
        "targetless",
        "transitions",
    )

    def __init__(
        self,
        transitions: tuple[Transition, ...],
        exits: tuple[StateNode, ...],
        recorded: Mapping[str, tuple[StateNode, ...]],
        entries: tuple[StateNode, ...],
        remaining: frozenset[StateNode],
        target: Configuration,
    ) -> None:
        self.transitions = transitions
        self.exits = exits
        self.recorded = recorded
        self.entries = entries
        self.remaining = remaining  # the active states between the exits and the entries
        self.target = target
        self.targetless = len(transitions) == 1 and not transitions[0].targets
        # where a history state leads depends on what it holds: a target, or the initial
        # state of a state entered, that is a history state makes the plan good only once
        self.reads_history = any(t.has_history_target for t in transitions) or any(
            n.initial is not None and n.initial.type == HISTORY for n in entries
        )
        # entering a final state, and some built-ins (``enqueue_actions``' check, SCXML's
        # In()), look at the active states while the microstep runs: keep them exact then
        self.observes_nodes = any(n.type == FINAL for n in entries) or any(
            _reads_configuration(a) for a in self.actions()
        )

    def actions(self) -> Iterator[ActionSpec]:
        """The microstep's actions in the order they run: exits, transitions, entries."""
        for node in self.exits:
            yield from node.exit
        for transition in self.transitions:
            yield from transition.actions
        for node in self.entries:
            yield from node.entry


PLANS_PER_CONFIGURATION = 1024


def plan_for(step: Step, transitions: list[Transition]) -> Plan:
    """The plan of ``transitions`` in the step's configuration: the one kept on the
    configuration, else computed now (and kept, unless it reads history)."""
    configuration = step.configuration
    assert configuration is not None
    key: Any = transitions[0] if len(transitions) == 1 else tuple(transitions)
    plan = configuration.plans.get(key) if step.plans else None
    if plan is None:
        plan = compute_plan(step.configurations, configuration, transitions, step.history)
        if (
            step.plans
            and not plan.reads_history
            and len(configuration.plans) < PLANS_PER_CONFIGURATION
        ):
            configuration.plans[key] = plan
    return plan


def compute_plan(
    configurations: Configurations,
    configuration: Configuration,
    transitions: list[Transition],
    history: Mapping[str, tuple[StateNode, ...]],
) -> Plan:
    """SCXML's microstep, computed without running anything: conflicts removed, the exit
    set (recording history), the entry set with the history just recorded."""
    nodes = configuration.node_set
    kept = remove_conflicting_transitions(transitions, nodes, history)
    exits = tuple(sorted(compute_exit_set(kept, nodes, history), key=_order, reverse=True))
    recorded = record_history(exits, nodes, EMPTY)
    to_enter: set[StateNode] = set()
    compute_entry_set(kept, {**history, **recorded} if recorded else history, set(), to_enter)
    remaining = nodes.difference(exits)
    target = configurations.of_nodes(remaining | to_enter) if exits or to_enter else configuration
    return Plan(
        tuple(kept), exits, recorded, tuple(sorted(to_enter, key=_order)), remaining, target
    )


def run_plan(step: Step, plan: Plan, event: FrozenDict) -> None:
    """Exit, run the transitions' actions, enter, as ``plan`` says, ending in its target."""
    if plan.recorded:
        step.history = FrozenDict({**step.history, **plan.recorded})
    nodes = _own_nodes(step) if plan.observes_nodes else None
    for node in plan.exits:
        exit_state(step, node, event)
        if nodes is not None:
            nodes.discard(node)
    for transition in plan.transitions:
        run_actions(step, transition.actions, event)
    if step.retries and plan.exits:
        # after the transition's own actions, which may still read them (``recordSkip``)
        step.retries = retrying.closed(step.retries, step.definition.by_id, plan.remaining)
    completed: set[StateNode] = set()
    for node in plan.entries:
        if nodes is not None:
            nodes.add(node)
        enter_state(step, node, event)
        if node.type == FINAL:
            _complete(step, node, event, completed)
    step.configuration = plan.target
    step.nodes = plan.target.node_set


def _reads_configuration(action: ActionSpec) -> bool:
    """True for built-ins that may look at the active states while they run."""
    impl = action.impl
    return isinstance(impl, BuiltinAction) and not isinstance(impl, _BLIND_BUILTINS)


_BLIND_BUILTINS = (
    Assign,
    Raise,
    EmitAction,
    LogAction,
    SendToAction,
    SendParentAction,
    ForwardTo,
    Cancel,
    SpawnChild,
    StopChild,
    retrying.RecordFailure,
    retrying.RecordSkip,
)


def _own_nodes(step: Step) -> set[StateNode]:
    """The step's active-node set, made mutable (the configuration is about to change)."""
    nodes = step.nodes
    if not isinstance(nodes, set):
        nodes = step.nodes = set(nodes)
        step.configuration = None
    return nodes


def exit_state(step: Step, node: StateNode, event: FrozenDict) -> None:
    """Exit actions, then the state's timers cancelled and its invoked actors stopped."""
    run_actions(step, node.exit, event)
    for timer_event, _ in node.after_timers:
        step.cancel(timer_event)
    for invoke in node.invoke:
        step.stop_child(invoke.id)


def record_history(
    to_exit: Iterable[StateNode],
    nodes: AbstractSet[StateNode],
    history: Mapping[str, tuple[StateNode, ...]],
) -> Mapping[str, tuple[StateNode, ...]]:
    """History values after exiting ``to_exit``: deep history remembers atomic descendants,
    shallow history the active children."""
    changed: dict[str, tuple[StateNode, ...]] | None = None
    for node in to_exit:
        for history_node in node.history_children:
            if history_node.history == "deep":
                remembered = [n for n in nodes if n.is_atomic and n.is_descendant_of(node)]
            else:
                remembered = [n for n in nodes if n.parent is node]
            if changed is None:
                changed = dict(history)
            changed[history_node.id] = tuple(sorted(remembered, key=_order))
    return history if changed is None else FrozenDict(changed)


def enter_initial_states(step: Step, event: FrozenDict) -> None:
    """Start the machine: enter the root and its initial descendants."""
    root = step.definition.root
    to_enter = {root}
    add_descendants(root, step.history, set(), to_enter)
    enter(step, to_enter, event)
    step.nodes = frozenset(step.nodes)
    step.configuration = step.configurations.of_nodes(step.nodes)
    _exit_all_if_done(step, event)


def _exit_all_if_done(step: Step, event: FrozenDict) -> None:
    """A machine that reached its top-level final state exits every state (XState)."""
    if step.status == "done":
        for node in sorted(step.nodes, key=_order, reverse=True):
            run_actions(step, node.exit, event)


def enter(step: Step, to_enter: set[StateNode], event: FrozenDict) -> bool:
    """Enter ``to_enter`` in document order (parents before children)."""
    if not to_enter:
        return False
    completed: set[StateNode] = set()
    nodes = _own_nodes(step)
    for node in sorted(to_enter, key=_order):
        nodes.add(node)
        enter_state(step, node, event)
        if node.type == FINAL:
            _complete(step, node, event, completed)
    return True


def enter_state(step: Step, node: StateNode, event: FrozenDict) -> None:
    """Entry actions, then ``after`` timers, then invoked actors (XState's order: its
    ``after`` timers are entry actions, invocations start after them)."""
    key, attempt = None, 1
    if retrying.is_retry_part(node):
        step.retries, key, attempt = retrying.entered(step.retries, node, step.now)
    run_actions(step, node.entry, event)
    for timer_event, delay in node.after_timers:
        step.event = event
        step.schedule(timer_event, normalize_event(timer_event), delay, None)
    for invoke in node.invoke:
        actor_input = invoke.input(step.context, event) if callable(invoke.input) else invoke.input
        step.spawn(
            invoke.id,
            invoke.src,
            actor_input,
            invoke.system_id,
            node.id,
            invoke.logic,
            key,
            attempt,
        )


def _complete(step: Step, final: StateNode, event: FrozenDict, completed: set[StateNode]) -> None:
    if final.failure is not None:  # a failure final (extension): the machine fails here
        step.status, step.error = "error", final.failure
        return
    parent = final.parent
    assert parent is not None
    marker = parent if parent.type == PARALLEL else parent.parent
    root_completion = marker or final
    if parent.type == COMPOUND:
        output = _resolve_output(final.output, step, event)
        step.queue.append(done_event(parent.id, output))
    while (
        marker is not None
        and marker.type == PARALLEL
        and marker not in completed
        and in_final_state(step.nodes, marker)
    ):
        completed.add(marker)
        step.queue.append(done_event(marker.id, None))
        root_completion = marker
        marker = marker.parent
    if marker is not None:
        return
    step.status = "done"
    root = step.definition.root
    if root.output is not None:
        completion_output = (
            _resolve_output(root_completion.output, step, event)
            if root_completion.parent is not None
            else None
        )
        step.output = _resolve_output(
            root.output, step, done_event(root_completion.id, completion_output)
        )


def done_event(state_id: str, output: Any) -> FrozenDict:
    """``xstate.done.state.<id>`` with the final state's output."""
    event = {"type": done_state_event_type(state_id)}
    if output is not None:
        event["output"] = output
    return FrozenDict(event)


def _resolve_output(spec: Any, step: Step, event: FrozenDict) -> Any:
    if spec is None:
        return None
    if callable(spec):
        try:
            value = spec(step.context, event)
        except Exception as exc:
            raise ImplementationError("output", exc) from exc
        return freeze(value, "output")
    return freeze(spec, "output")


# -- exit and entry sets ---------------------------------------------------------------------


def compute_exit_set(
    transitions: Iterable[Transition],
    nodes: AbstractSet[StateNode],
    history: Mapping[str, tuple[StateNode, ...]],
) -> list[StateNode]:
    """The active states that ``transitions`` exit (targetless transitions exit nothing)."""
    to_exit: dict[StateNode, None] = {}
    for transition in transitions:
        if not transition.targets:
            continue
        domain = transition_domain(transition, history)
        if transition.reenter and transition.source is domain:
            to_exit[domain] = None
        for node in nodes:
            if domain is None or domain in node.ancestors:
                to_exit[node] = None
    return list(to_exit)


def transition_domain(
    transition: Transition, history: Mapping[str, tuple[StateNode, ...]]
) -> StateNode | None:
    """The state whose descendants a transition exits and enters (None: the whole machine,
    root included)."""
    targets = effective_targets(transition, history)
    source = transition.source
    if not transition.reenter and all(t is source or source in t.ancestors for t in targets):
        return source
    lca = least_common_ancestor([*targets, source])
    if lca is not None:
        return lca
    if transition.reenter:
        return None
    root = source
    while root.parent is not None:
        root = root.parent
    return root


def least_common_ancestor(nodes: list[StateNode]) -> StateNode | None:
    """The nearest proper ancestor of the first node that contains all the others."""
    head, tail = nodes[0], nodes[1:]
    for ancestor in head.ancestors:
        if all(ancestor in n.ancestors for n in tail):
            return ancestor
    return None


def effective_targets(
    transition: Transition, history: Mapping[str, tuple[StateNode, ...]]
) -> list[StateNode]:
    """Targets with history states replaced by what they remember (or their default)."""
    return list(dict.fromkeys(_effective(transition.targets, history)))


def _effective(
    targets: Iterable[StateNode], history: Mapping[str, tuple[StateNode, ...]]
) -> Iterable[StateNode]:
    for target in targets:
        if target.type == HISTORY:
            remembered = history.get(target.id)
            yield from remembered if remembered else _effective(history_default(target), history)
        else:
            yield target


def history_default(node: StateNode) -> tuple[StateNode, ...]:
    """Where a history state leads when nothing is remembered: its ``target``, else the
    parent's initial state (all regions for a parallel parent)."""
    if node.history_default:
        return node.history_default
    parent = node.parent
    assert parent is not None
    if parent.type == PARALLEL:
        return parent.regions
    return (parent.initial,) if parent.initial is not None else ()


def compute_entry_set(
    transitions: Iterable[Transition],
    history: Mapping[str, tuple[StateNode, ...]],
    default_entry: set[StateNode],
    to_enter: set[StateNode],
) -> None:
    """The states ``transitions`` enter (targets, their ancestors below the domain, and the
    initial or remembered descendants)."""
    for transition in transitions:
        domain = transition_domain(transition, history)
        source = transition.source
        for target in transition.targets:
            if target.type != HISTORY and (
                target is not source or source is not domain or transition.reenter
            ):
                to_enter.add(target)
                default_entry.add(target)
            add_descendants(target, history, default_entry, to_enter)
        for target in effective_targets(transition, history):
            ancestors = proper_ancestors(target, domain)
            if domain is not None and domain.type == PARALLEL:
                ancestors.append(domain)
            reentry = None if source.parent is None and transition.reenter else domain
            add_ancestors(ancestors, history, default_entry, to_enter, reentry)


def proper_ancestors(node: StateNode, up_to: StateNode | None) -> list[StateNode]:
    """Ancestors of ``node`` below ``up_to`` (all of them when ``up_to`` is None; none when
    ``node`` is ``up_to``, as in XState's getProperAncestors)."""
    result: list[StateNode] = []
    if node is up_to:
        return result
    for ancestor in node.ancestors:
        if ancestor is up_to:
            break
        result.append(ancestor)
    return result


def add_descendants(
    node: StateNode,
    history: Mapping[str, tuple[StateNode, ...]],
    default_entry: set[StateNode],
    to_enter: set[StateNode],
) -> None:
    """Add what entering ``node`` enters below it: initial states, all regions, or what a
    history state remembers."""
    if node.type == HISTORY:
        parent = node.parent
        assert parent is not None
        remembered = history.get(node.id)
        targets = remembered if remembered else history_default(node)
        for target in targets:
            to_enter.add(target)
            if not remembered and not node.history_default:
                default_entry.add(parent)
            add_descendants(target, history, default_entry, to_enter)
        for target in targets:
            add_ancestors(proper_ancestors(target, parent), history, default_entry, to_enter)
    elif node.type == COMPOUND:
        initial = node.initial
        assert initial is not None
        if initial.type != HISTORY:
            to_enter.add(initial)
            default_entry.add(initial)
        add_descendants(initial, history, default_entry, to_enter)
        add_ancestors(proper_ancestors(initial, node), history, default_entry, to_enter)
    elif node.type == PARALLEL:
        for region in node.regions:
            if not any(region in n.ancestors for n in to_enter):
                to_enter.add(region)
                default_entry.add(region)
                add_descendants(region, history, default_entry, to_enter)


def add_ancestors(
    ancestors: Iterable[StateNode],
    history: Mapping[str, tuple[StateNode, ...]],
    default_entry: set[StateNode],
    to_enter: set[StateNode],
    reentry_domain: StateNode | None = None,
) -> None:
    """Add ``ancestors`` (those below ``reentry_domain``), completing parallel ones with their
    other regions."""
    for ancestor in ancestors:
        if reentry_domain is None or reentry_domain in ancestor.ancestors:
            to_enter.add(ancestor)
        if ancestor.type == PARALLEL:
            for region in ancestor.regions:
                if not any(region in n.ancestors for n in to_enter):
                    to_enter.add(region)
                    add_descendants(region, history, default_entry, to_enter)


# -- actions ---------------------------------------------------------------------------------


def run_actions(step: Step, actions: Iterable[ActionSpec], event: FrozenDict) -> None:
    """Resolve built-in actions now; turn user actions into ``RunAction`` effects carrying the
    context they must see (after the assigns before them)."""
    for action in actions:
        impl = action.impl
        params = action.params
        if callable(params):
            params = freeze(params(step.context, event), f"action '{action.type}' params")
        if isinstance(impl, BuiltinAction):
            step.event = event
            try:
                impl.resolve(step, params or EMPTY)
            except StatechartError:
                raise
            except Exception as exc:
                raise ImplementationError(f"action '{action.type}'", exc) from exc
        else:
            step.effects.append(
                fx.RunAction(action.type, params or EMPTY, step.context, event, impl)
            )


def _order(node: StateNode) -> int:
    return node.order


def _due_order(timers: dict[str, Timer] | None) -> tuple[Timer, ...]:
    return tuple(sorted(timers.values(), key=lambda t: (t.due_at, t.id))) if timers else ()
