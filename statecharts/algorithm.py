"""The run-to-completion algorithm: macrosteps of microsteps, as XState v5 runs them (which
follows the SCXML algorithm; see docs/semantics.md for where they differ).

Read top to bottom next to https://www.w3.org/TR/scxml/#AlgorithmforSCXMLInterpretation:
``macrostep`` -> ``select_transitions`` / ``select_eventless_transitions`` ->
``remove_conflicting_transitions`` -> ``microstep`` (``exit_states``, transition actions,
``enter_states``). Everything here is pure: it changes only the ``Step`` it is given, and user
actions become effects instead of being called.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from . import effects as fx
from .actions import ActionSpec, BuiltinAction
from .configuration import Configuration, in_final_state
from .errors import ImplementationError, InfiniteLoopError, StatechartError
from .events import done_state_event_type, is_error_actor_event
from .frozen import EMPTY, FrozenDict, freeze, frozen_update
from .nodes import COMPOUND, FINAL, HISTORY, PARALLEL, StateNode, Transition
from .snapshot import FINISHED, VISITS, ChildRef, Timer, finished_child

if TYPE_CHECKING:
    from .machine import Machine

MAX_MICROSTEPS = 10_000
"""A macrostep that has not settled after this many microsteps is an eventless loop."""


class Step:
    """The working state of one macrostep: what ``Snapshot`` holds, made mutable, plus the
    internal queue and the effects collected so far. Built-in actions act on it."""

    __slots__ = (
        "builtins_run",
        "children",
        "children_changed",
        "configuration",
        "context",
        "effects",
        "error",
        "event",
        "guards_used",
        "history",
        "history_read",
        "machine",
        "microsteps",
        "nodes",
        "now",
        "output",
        "queue",
        "retries",
        "skipped",
        "status",
        "timers",
        "timers_changed",
        "trace",
    )

    def __init__(self, machine: Machine, nodes: Configuration | None, context: FrozenDict,
                 history: Mapping[str, tuple[StateNode, ...]], timers: Iterable[Timer],
                 children: Mapping[str, ChildRef], now: Callable[[], int],
                 retries: FrozenDict = EMPTY, skipped: tuple[Any, ...] = ()) -> None:
        self.machine = machine
        # the configuration the step started in, until the first exit or entry changes it;
        # ``nodes`` is its frozen node set until then (copied to a set on first change)
        self.configuration = nodes
        self.nodes: set[StateNode] | frozenset[StateNode] = \
            nodes.node_set if nodes is not None else set()
        self.context = context
        self.history = history
        self.timers: dict[str, Timer] = {t.id: t for t in timers} if timers else {}
        self.children: dict[str, ChildRef] = dict(children) if children else {}
        self.status = "active"
        self.output: Any = None
        self.error: Any = None
        self.queue: list[FrozenDict] = []  # short: a list beats a deque here
        self.effects: list[fx.Effect] = []
        self.event: FrozenDict = EMPTY
        self.now = now
        self.guards_used = False
        self.builtins_run = False  # a built-in's outcome may depend on context or timers
        self.history_read = False
        self.trace: list[tuple[FrozenDict, tuple[Transition, ...]]] | None = None
        self.retries = retries
        self.skipped = skipped
        self.microsteps = 0
        self.timers_changed = False
        self.children_changed = False

    # -- what built-in actions may do (statecharts.actions.ActionScope) ---------------------

    def effect(self, effect: fx.Effect) -> None:
        self.effects.append(effect)

    def assign(self, changes: Mapping[str, Any]) -> None:
        self.context = frozen_update(self.context, changes)

    def raise_internal(self, event: FrozenDict) -> None:
        self.queue.append(event)

    def schedule(self, timer_id: str, event: FrozenDict, delay: Any, target: str | None) -> None:
        ms = self.machine.resolve_delay(delay, self.context, self.event, self)
        due_at = self.now() + ms
        self.timers[timer_id] = Timer(timer_id, event, due_at, target)
        self.timers_changed = True
        self.effects.append(fx.StartTimer(timer_id, event, ms, due_at, target))

    def cancel(self, timer_id: str) -> None:
        if self.timers.pop(timer_id, None) is not None:
            self.timers_changed = True
            self.effects.append(fx.CancelTimer(timer_id))

    def spawn(self, actor_id: str | None, src: Any, input: Any, system_id: str | None,
              invoked_by: str | None = None, logic: Any = None, key: str | None = None,
              attempt: int = 1, *, sync_snapshot: bool = False) -> None:
        if logic is None:
            name, logic = self.machine.resolve_actor(src)
        else:
            name = src
        if actor_id is None:
            n = 0
            while f"{name}#{n}" in self.children:
                n += 1
            actor_id = f"{name}#{n}"
        frozen_input = freeze(input, "input")
        self.children[actor_id] = ChildRef(actor_id, name, system_id, invoked_by, frozen_input)
        self.children_changed = True
        self.effects.append(fx.StartChild(actor_id, name, frozen_input, system_id, invoked_by,
                                          key, attempt, logic, sync_snapshot))

    def stop_child(self, actor_id: str) -> None:
        if self.children.pop(actor_id, None) is not None:
            self.children_changed = True
            for index, effect in enumerate(self.effects):
                if isinstance(effect, fx.StartChild) and effect.id == actor_id:
                    # started and left in the same macrostep: XState starts invocations at
                    # the end of the macrostep, so this one never starts
                    del self.effects[index]
                    return
            self.effects.append(fx.StopChild(actor_id))

    def in_state(self, state_id: str) -> bool:
        node = self.machine.definition.by_id.get(state_id)
        return node is not None and node in self.nodes

    def check(self, guard: Any) -> bool:
        spec = self.machine.resolve_guard(guard)
        return spec.evaluate(self.context, self.event, self)

    def retry_allowed(self, state_id: str, event: FrozenDict) -> bool:
        record = self.retries[state_id]
        policy = self.machine.definition.by_id[state_id].retry
        return bool(policy.allows(record["attempt"], event.get("error"), record["started_at"],
                                  self.now(), record["key"]))

    def record_failure(self, state_id: str) -> None:
        self._update_retry(state_id, last_error=self.event.get("error"))

    def record_skip(self, state_id: str) -> None:
        record = self.retries.get(state_id, {})
        node = self.machine.definition.by_id[state_id]
        self.skipped = (*self.skipped, FrozenDict(
            state=state_id, invoke=node.retry_invoke, attempts=record.get("attempt", 0),
            error=self.event.get("error")))

    def _update_retry(self, state_id: str, **changes: Any) -> None:
        self.retries = FrozenDict({**self.retries,
                                   state_id: FrozenDict({**self.retries[state_id], **changes})})

    def run_actions(self, actions: list[Any]) -> None:
        run_actions(self, [self.machine.resolve_action(a) for a in actions], self.event)


# -- the macrostep ---------------------------------------------------------------------------

def macrostep(step: Step, event: FrozenDict, selected: list[Transition] | None = None) -> None:
    """Process one external event to completion: its microstep, then eventless transitions and
    internal events until the machine is at rest. ``selected``: the transitions already
    chosen for ``event`` (by a caller that had to evaluate the guards anyway)."""
    _forget_finished_child(step, event)
    transitions = select_transitions(step, event) if selected is None else selected
    if not transitions and is_error_actor_event(event):
        step.status = "error"  # an unhandled actor error fails the machine, as in XState
        step.error = event.get("error")
        _stop_everything(step)
        return
    microstep(step, transitions, event)
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
            raise InfiniteLoopError(f"the machine did not settle after {MAX_MICROSTEPS} "
                                    f"microsteps (eventless transitions or raised events loop "
                                    f"in: {active})")
    if step.status != "active":
        _stop_everything(step)


def _forget_finished_child(step: Step, event: FrozenDict) -> None:
    """Mark the child a done/error event comes from as finished; XState keeps it in
    ``snapshot.children`` until its invoking state is exited (or it is stopped)."""
    kind = event["type"]
    if kind.startswith(("xstate.done.actor.", "xstate.error.actor.")):
        child_id = kind.split(".", 3)[3]
        ref = step.children.get(child_id)
        if ref is not None and finished_child(ref) is None:
            outcome = "done" if kind.startswith("xstate.done.") else "error"
            step.children[child_id] = replace(ref, state=FrozenDict({FINISHED: outcome}))
            step.children_changed = True


def _stop_everything(step: Step) -> None:
    for actor_id in list(step.children):
        step.stop_child(actor_id)
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
    _select_in(step.machine.root, step, event, event["type"], found)
    return found


def _select_in(node: StateNode, step: Step, event: FrozenDict, kind: str,
               found: list[Transition]) -> bool:
    nodes = step.nodes
    took = False
    if node.type == PARALLEL:
        for region in node.regions:
            if region in nodes and _select_in(region, step, event, kind, found):
                took = True
    elif node.type == COMPOUND:
        for child in node.children:
            if child in nodes:
                took = _select_in(child, step, event, kind, found)
                break
    if took:
        return True
    transition = first_enabled(node.candidates(kind), step, event)
    if transition is not None:
        found.append(transition)
        return True
    return False


def first_enabled(candidates: Iterable[Transition], step: Step,
                  event: FrozenDict) -> Transition | None:
    """The first candidate, in priority order, whose guard passes."""
    for transition in candidates:
        guard = transition.guard
        if guard is None:
            return transition
        step.guards_used = True
        try:
            if guard.evaluate(step.context, event, step):
                return transition
        except ImplementationError as exc:
            raise ImplementationError(f"{exc.where} at {transition.config_path}",
                                      exc.cause) from exc
    return None


def select_eventless_transitions(step: Step, event: FrozenDict) -> list[Transition]:
    """For each atomic state (document order), the first enabled ``always`` transition of it
    or its nearest ancestor that has one; conflicts removed."""
    if not step.machine.has_always:
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


def remove_conflicting_transitions(transitions: list[Transition], nodes: AbstractSet[StateNode],
                                   history: Mapping[str, tuple[StateNode, ...]]
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
    """Take ``transitions`` together: exit, transition actions, enter. Returns whether the
    configuration, context or history changed."""
    if not transitions:
        return False
    step.microsteps += 1
    if len(transitions) == 1 and not transitions[0].targets:
        return _targetless_microstep(step, transitions[0], event)
    transitions = remove_conflicting_transitions(transitions, step.nodes, step.history)
    _own_nodes(step)
    if any(t.has_history_target for t in transitions):
        step.history_read = True
    if step.trace is not None:
        step.trace.append((event, tuple(transitions)))
    # identity, not equality: an assign always makes a new context, and XState re-selects
    # eventless transitions after any assign even when the values are equal
    before = (step.context, step.history, step.retries)
    exited = exit_states(step, transitions, event)
    for transition in transitions:
        run_actions(step, transition.actions, event)
    if step.retries and exited:
        _close_retry_records(step)
    entered = enter_states(step, transitions, event)
    _exit_all_if_done(step, event)
    return bool(exited or entered) or \
        any(a is not b for a, b in zip(before, (step.context, step.history, step.retries)))


def _own_nodes(step: Step) -> set[StateNode]:
    """The step's active-node set, made mutable (the configuration is about to change)."""
    nodes = step.nodes
    if not isinstance(nodes, set):
        nodes = step.nodes = set(nodes)
        step.configuration = None
    return nodes


def _targetless_microstep(step: Step, transition: Transition, event: FrozenDict) -> bool:
    """A transition without target exits and enters nothing: only its actions run."""
    if step.trace is not None:
        step.trace.append((event, (transition,)))
    context = step.context
    run_actions(step, transition.actions, event)
    return step.context is not context


def exit_states(step: Step, transitions: list[Transition], event: FrozenDict) -> bool:
    """Exit the states ``transitions`` leave, innermost first, recording history first."""
    to_exit = sorted(compute_exit_set(transitions, step.nodes, step.history), key=_order,
                     reverse=True)
    if not to_exit:
        return False
    step.history = record_history(to_exit, step.nodes, step.history)
    nodes = _own_nodes(step)
    for node in to_exit:
        run_actions(step, node.exit, event)
        for timer_event, _ in node.after_timers:
            step.cancel(timer_event)
        for invoke in node.invoke:
            step.stop_child(invoke.id)
        nodes.discard(node)
    return True


def _close_retry_records(step: Step) -> None:
    """Forget the retry records of retried states just exited (after the transition's own
    actions, which may still read them: ``recordSkip``)."""
    by_id = step.machine.definition.by_id
    kept = {k: v for k, v in step.retries.items() if k == VISITS or by_id[k] in step.nodes}
    if len(kept) != len(step.retries):
        step.retries = FrozenDict(kept)


def record_history(to_exit: list[StateNode], nodes: AbstractSet[StateNode],
                   history: Mapping[str, tuple[StateNode, ...]]
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


def enter_states(step: Step, transitions: list[Transition], event: FrozenDict) -> bool:
    """Enter the states ``transitions`` lead to, outermost first, raising done events."""
    to_enter: set[StateNode] = set()
    default_entry: set[StateNode] = set()
    compute_entry_set(transitions, step.history, default_entry, to_enter)
    return enter(step, to_enter, event)


def enter_initial_states(step: Step, event: FrozenDict) -> None:
    """Start the machine: enter the root and its initial descendants."""
    root = step.machine.root
    to_enter = {root}
    add_descendants(root, step.history, set(), to_enter)
    enter(step, to_enter, event)
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
    key, attempt = _count_attempt(step, node)
    run_actions(step, node.entry, event)
    for timer_event, delay in node.after_timers:
        step.event = event
        step.schedule(timer_event, step.machine.event(timer_event), delay, None)
    for invoke in node.invoke:
        actor_input = invoke.input(step.context, event) if callable(invoke.input) else \
            invoke.input
        step.spawn(invoke.id, invoke.src, actor_input, invoke.system_id, node.id, invoke.logic,
                   key, attempt)


def _count_attempt(step: Step, node: StateNode) -> tuple[str | None, int]:
    """Retry bookkeeping: entering a retried state opens its record (key stable across its
    attempts); entering its ``attempting`` child counts an attempt."""
    if node.retry is not None:
        now = step.now()
        visits = step.retries.get(VISITS, EMPTY)
        visit = visits.get(node.id, 0) + 1
        step.retries = FrozenDict({
            **step.retries, VISITS: FrozenDict({**visits, node.id: visit}),
            node.id: FrozenDict(attempt=0, last_error=None, started_at=now,
                                key=f"{node.id}@{now}#{visit}")})
    owner = node.retry_attempt_of
    if owner is None:
        return None, 1
    record = step.retries[owner.id]
    attempt = record["attempt"] + 1
    step._update_retry(owner.id, attempt=attempt)
    return str(record["key"]), attempt


def _complete(step: Step, final: StateNode, event: FrozenDict,
              completed: set[StateNode]) -> None:
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
    while marker is not None and marker.type == PARALLEL and marker not in completed and \
            in_final_state(step.nodes, marker):
        completed.add(marker)
        step.queue.append(done_event(marker.id, None))
        root_completion = marker
        marker = marker.parent
    if marker is not None:
        return
    step.status = "done"
    root = step.machine.root
    if root.output is not None:
        completion_output = _resolve_output(root_completion.output, step, event) \
            if root_completion.parent is not None else None
        step.output = _resolve_output(root.output, step,
                                      done_event(root_completion.id, completion_output))


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

def compute_exit_set(transitions: Iterable[Transition], nodes: AbstractSet[StateNode],
                     history: Mapping[str, tuple[StateNode, ...]]) -> list[StateNode]:
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


def transition_domain(transition: Transition, history: Mapping[str, tuple[StateNode, ...]]
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


def effective_targets(transition: Transition, history: Mapping[str, tuple[StateNode, ...]]
                      ) -> list[StateNode]:
    """Targets with history states replaced by what they remember (or their default)."""
    return list(dict.fromkeys(_effective(transition.targets, history)))


def _effective(targets: Iterable[StateNode], history: Mapping[str, tuple[StateNode, ...]]
               ) -> Iterable[StateNode]:
    for target in targets:
        if target.type == HISTORY:
            remembered = history.get(target.id)
            yield from remembered if remembered else _effective(history_default(target),
                                                                history)
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


def compute_entry_set(transitions: Iterable[Transition],
                      history: Mapping[str, tuple[StateNode, ...]],
                      default_entry: set[StateNode], to_enter: set[StateNode]) -> None:
    """The states ``transitions`` enter (targets, their ancestors below the domain, and the
    initial or remembered descendants)."""
    for transition in transitions:
        domain = transition_domain(transition, history)
        source = transition.source
        for target in transition.targets:
            if target.type != HISTORY and (target is not source or source is not domain or
                                           transition.reenter):
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


def add_descendants(node: StateNode, history: Mapping[str, tuple[StateNode, ...]],
                    default_entry: set[StateNode], to_enter: set[StateNode]) -> None:
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


def add_ancestors(ancestors: Iterable[StateNode], history: Mapping[str, tuple[StateNode, ...]],
                  default_entry: set[StateNode], to_enter: set[StateNode],
                  reentry_domain: StateNode | None = None) -> None:
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
            step.builtins_run = True
            step.event = event
            try:
                impl.resolve(step, params or EMPTY)
            except StatechartError:
                raise
            except Exception as exc:
                raise ImplementationError(f"action '{action.type}'", exc) from exc
        else:
            step.effects.append(fx.RunAction(action.type, params or EMPTY, step.context, event,
                                             impl))


def _order(node: StateNode) -> int:
    return node.order
