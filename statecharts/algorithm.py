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
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import replace as replace_dataclass
from functools import partial
from typing import Any

from msgspec.structs import replace

from . import effects as fx
from .actions import (
    ActionSpec,
    Assign,
    BuiltinAction,
    Cancel,
    EmitAction,
    ForwardTo,
    LogAction,
    Raise,
    RecordFailure,
    RecordSkip,
    SendParentAction,
    SendToAction,
    SpawnChild,
    StopChild,
)
from .configuration import NOT_COMPILED, Configuration, Configurations, in_final_state
from .definition import Definition, Implementations, resolve_action, resolve_actor, resolve_guard
from .effects import NO_EFFECTS, RunAction
from .errors import ImplementationError, InfiniteLoopError, StatechartError
from .events import done_state_event_type, is_error_actor_event, normalize_event
from .frozen import (
    EMPTY,
    FrozenDict,
    as_is,
    freeze,
    frozen_update,
    text_problem,
)
from .limits import MAX_DELAY
from .nodes import COMPOUND, FINAL, HISTORY, PARALLEL, StateNode, Transition
from .snapshot import FINISHED, VISITS, ChildRef, Snapshot, SnapshotOwner, Timer, finished_child

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

    def __init__(self, definition: Definition, implementations: Implementations,
                 configurations: Configurations, base: Snapshot | None,
                 now: Callable[[], int], context: FrozenDict = EMPTY,
                 trace: list[tuple[FrozenDict, tuple[Transition, ...]]] | None = None,
                 plans: bool = True) -> None:
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
            timers = self._timers = {t.id: t for t in self.base.timers} \
                if self.base is not None else {}
        return timers

    @property
    def children(self) -> dict[str, ChildRef]:
        """The child actors, made changeable (the snapshot's stay as they were)."""
        children = self._children
        if children is None:
            children = self._children = dict(self.base.children) \
                if self.base is not None else {}
        return children

    def has_timers(self) -> bool:
        return bool(self._timers) if self._timers is not None else \
            self.base is not None and bool(self.base.timers)

    def has_children(self) -> bool:
        return bool(self._children) if self._children is not None else \
            self.base is not None and bool(self.base.children)

    def result(self, machine: SnapshotOwner) -> Snapshot:
        """The snapshot this step ends in (parts it did not change shared with the one it
        started from)."""
        configuration = self.configuration
        assert configuration is not None
        base = self.base
        if base is None:
            return Snapshot(machine=machine, configuration=configuration, context=self.context,
                            status=self.status, output=self.output, error=self.error,
                            history_nodes=self.history, timers=_due_order(self._timers),
                            children=FrozenDict(self._children or {}),
                            retry_records=self.retries, skipped=self.skipped)
        if self._timers is None and self._children is None and self.status == "active" and \
                self.history is base.history_nodes and self.retries is base.retry_records and \
                self.skipped is base.skipped:
            if configuration is base.configuration and self.context is base.context:
                return base
            return replace(base, configuration=configuration, context=self.context)
        return replace(
            base, configuration=configuration, context=self.context, status=self.status,
            output=self.output, error=self.error, history_nodes=self.history,
            timers=base.timers if self._timers is None else _due_order(self._timers),
            children=base.children if self._children is None else FrozenDict(self._children),
            retry_records=self.retries, skipped=self.skipped)

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

    def spawn(self, actor_id: str | None, src: Any, input: Any, system_id: str | None,
              invoked_by: str | None = None, logic: Any = None, key: str | None = None,
              attempt: int = 1, *, sync_snapshot: bool = False) -> None:
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
        self.effects.append(fx.StartChild(actor_id, name, frozen_input, system_id, invoked_by,
                                          key, attempt, logic, sync_snapshot))

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

    def retry_allowed(self, state_id: str, event: FrozenDict) -> bool:
        record = self.retries[state_id]
        policy = self.definition.by_id[state_id].retry
        return bool(policy.allows(record["attempt"], event.get("error"), record["started_at"],
                                  self.now(), record["key"]))

    def record_failure(self, state_id: str) -> None:
        self._update_retry(state_id, last_error=self.event.get("error"))

    def record_skip(self, state_id: str, invoke: str | None = None) -> None:
        record = self.retries.get(state_id, {})  # none for a call without retry: one attempt
        node = self.definition.by_id[state_id]
        self.skipped = (*self.skipped, FrozenDict(
            state=state_id, invoke=invoke or node.retry_invoke, attempts=record.get("attempt", 1),
            error=self.event.get("error")))

    def _update_retry(self, state_id: str, **changes: Any) -> None:
        self.retries = FrozenDict({**self.retries,
                                   state_id: FrozenDict({**self.retries[state_id], **changes})})

    def run_actions(self, actions: list[Any]) -> None:
        run_actions(self, [_action_spec(self.definition, self.implementations, a)
                           for a in actions], self.event)

    def delay_ms(self, delay: Any) -> int:
        """Milliseconds for ``delay``: a number, a name from ``delays=``, a function, or a
        retried call's next wait."""
        name = delay if isinstance(delay, str) else getattr(delay, "__name__", "delay")
        value = delay
        retried = self.definition.retry_delays.get(delay) if isinstance(delay, str) else None
        if retried is not None:
            record = self.retries[retried.id]
            return int(retried.retry.delay_for(record["attempt"], record["last_error"],
                                               record["key"]))
        if isinstance(delay, str):
            if delay not in self.implementations.delays:
                raise ImplementationError(f"delay {delay!r}", LookupError("no such delay"))
            value = self.implementations.delays[delay]
        if callable(value):
            try:
                value = value(self.context, self.event)
            except Exception as exc:
                raise ImplementationError(f"delay {name!r}", exc) from exc
        if isinstance(value, bool) or not isinstance(value, int | float) or \
                not math.isfinite(value) or value < 0:
            raise ImplementationError(f"delay {name!r}", ValueError(
                f"a delay is a non-negative number of milliseconds, not {value!r}"))
        if value > MAX_DELAY:  # its due time must still persist as a JSON integer
            raise ImplementationError(f"delay {name!r}", ValueError(
                f"a delay is at most {MAX_DELAY} ms, not {value!r}"))
        return int(value)


def _action_spec(definition: Definition, implementations: Implementations,
                 action: Any) -> ActionSpec:
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
            raise InfiniteLoopError(f"the machine did not settle after {MAX_MICROSTEPS} "
                                    f"microsteps (eventless transitions or raised events loop "
                                    f"in: {active})")
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
            step.children[child_id] = replace_dataclass(
                ref, state=FrozenDict({FINISHED: outcome}))


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
    _select_in(step.definition.root, step.nodes, event["type"],
               lambda candidates: first_enabled(candidates, step, event), found)
    return found


def _select_in(node: StateNode, nodes: AbstractSet[StateNode], kind: str,
               choose: Callable[[tuple[Transition, ...]], Transition | None],
               found: list[Transition]) -> bool:
    took = False
    if node.type == PARALLEL:
        for region in node.regions:
            if region in nodes and _select_in(region, nodes, kind, choose, found):
                took = True
    elif node.type == COMPOUND:
        for child in node.children:
            if child in nodes:
                took = _select_in(child, nodes, kind, choose, found)
                break
    if took:
        return True
    transition = choose(node.candidates(kind))
    if transition is not None:
        found.append(transition)
        return True
    return False


class Route:
    """How events of one type are taken in one configuration, compiled: the candidate
    transitions in priority order, each with its guard (a user function called directly, or
    none) and its plan when that plan is nothing but compiled actions and a change of
    configuration (None: take the full step). Exists only where selection is this simple:
    a single-chain configuration whose guards are all plain user functions, or any
    configuration where no guard decides; not for the engine's own events, nor where an
    eventless transition could follow.

    ``take`` is the route composed into one function when it is compiled (closures over these
    facts, see ``compose_route``): ``take(snapshot, context, event, effects, trace)`` -> the
    result, or None where the transition chosen needs the full step."""

    __slots__ = ("choices", "take")

    def __init__(self, choices: tuple[tuple[Transition | None, Any, Plan | None], ...],
                 configuration: Configuration, checks_retries: bool) -> None:
        self.choices = choices
        self.take: Take = compose_route(choices, configuration, checks_retries)


def route_for(configurations: Configurations, configuration: Configuration,
              kind: str) -> Take | None:
    """The compiled route of ``kind`` in ``configuration`` as its composed function
    (``Route.take``, kept on the configuration: these are facts of the definition), or None
    where events of this type take the full step."""
    found = configuration.routes.get(kind, UNKNOWN)
    if found is UNKNOWN:
        route = _compile_route(configurations, configuration, kind)
        found = route.take if route is not None else None
        if len(configuration.routes) < PLANS_PER_CONFIGURATION:
            configuration.routes[kind] = found
    return found  # type: ignore[no-any-return]


def _compile_route(configurations: Configurations, configuration: Configuration,
                   kind: str) -> Route | None:
    if kind.startswith("xstate.") or configuration.has_always:
        return None
    if configuration.chain is not None:
        choices: list[tuple[Transition | None, Any, Plan | None]] = []
        for transition in configuration.chain_candidates(kind):
            if transition.guard is not None and transition.guard_fn is None:
                return None  # a guard that needs the step (combinators, stateIn, params)
            choices.append((transition, transition.guard_fn,
                            _direct_plan(configurations, configuration, [transition])))
            if transition.guard is None:
                break  # the candidates after an unguarded one are never taken
        return Route(tuple(choices), configuration, True)
    if any(t.guard is not None for n in configuration.nodes for t in n.candidates(kind)):
        return None
    selected: list[Transition] = []
    _select_in(configurations.root, configuration.node_set, kind,
               lambda candidates: candidates[0] if candidates else None, selected)
    if not selected:
        return Route((), configuration, True)
    return Route(((None, None, _direct_plan(configurations, configuration, selected)),),
                 configuration, True)


def _direct_plan(configurations: Configurations, configuration: Configuration,
                 transitions: list[Transition],
                 seen: frozenset[Configuration] = frozenset()) -> Plan | None:
    """The plan of ``transitions`` when it can run without a ``Step``: only compiled actions,
    no history recorded or read, and the eventless transitions after it compiled too."""
    if any(t.has_history_target for t in transitions):
        return None
    key: Any = transitions[0] if len(transitions) == 1 else tuple(transitions)
    plan = configuration.plans.get(key)
    if plan is None:
        plan = compute_plan(configurations, configuration, transitions, EMPTY)
        if plan.reads_history:
            return None
        configuration.plans[key] = plan
    direct = plan.ops is not None and not plan.recorded and (
        not plan.target.has_always or (plan.target not in seen and  # not back round a loop
                                       eventless_route(configurations, plan.target,
                                                       seen) is not None))
    return plan if direct else None


def eventless_route(configurations: Configurations, configuration: Configuration,
                    seen: frozenset[Configuration] = frozenset()) -> Route | None:
    """What ``settle`` does on arriving in ``configuration``, compiled (kept on it): its
    eventless candidates along its one chain (``select_eventless_transitions``), each with a
    plain guard and a direct plan to another configuration. None where that needs the full
    step: parallel states, guards that need the step, targetless eventless transitions (an
    assign loop) and chains of them that could come back (``MAX_MICROSTEPS`` is the full
    step's to count)."""
    found = configuration.eventless
    if found is UNKNOWN:
        found = _compile_eventless(configurations, configuration, seen | {configuration})
        configuration.eventless = found
    return found  # type: ignore[no-any-return]


def _compile_eventless(configurations: Configurations, configuration: Configuration,
                       seen: frozenset[Configuration]) -> Route | None:
    if configuration.chain is None:
        return None
    choices: list[tuple[Transition | None, Any, Plan | None]] = []
    for transition in (t for node in configuration.chain for t in node.always):
        if (transition.guard is not None and transition.guard_fn is None) or \
                not transition.targets:
            return None
        plan = _direct_plan(configurations, configuration, [transition], seen)
        if plan is None:
            return None
        choices.append((transition, transition.guard_fn, plan))
        if transition.guard is None:
            break
    return Route(tuple(choices), configuration, False)


Trace = list[tuple[FrozenDict, tuple[Transition, ...]]]
Take = Callable[[Snapshot, FrozenDict, FrozenDict, "list[fx.Effect] | None", "Trace | None"],
                "tuple[Snapshot, tuple[fx.Effect, ...]] | None"]
"""A composed route or plan: ``(snapshot, context, event, effects, trace)`` -> the snapshot
after the event and its effects (None: the full step). ``context`` and ``effects`` are what
the microsteps before it made (``effects`` None until one emits)."""


def compose_route(choices: tuple[tuple[Transition | None, Any, Plan | None], ...],
                  configuration: Configuration, checks_retries: bool) -> Take:
    """``choices`` as one function: a chain in priority order, each choice testing its guard
    and, when it fails, handing over to the next; after the last the machine rests in
    ``configuration``. The first choice is the route itself, so an event whose first guard
    passes costs no dispatch. An event's route (``checks_retries``) leaves to the full step
    the plans that must close retry records."""
    take: Take = partial(_at_rest, configuration=configuration)
    for transition, test, plan in reversed(choices):
        take = compose_choice(transition, test, plan, take, checks_retries)
    return take


def compose_choice(transition: Transition | None, test: Any, plan: Plan | None,
                   otherwise: Take, checks_retries: bool) -> Take:
    """One choice of a route as a function: its guard (``otherwise`` when it fails), then its
    direct plan (None: the full step): the compiled actions on the context (``Op``: each
    user action's ``RunAction``, each assign's new context, run here without a call of their
    own), then the eventless route of the configuration it reaches (compiled with it), or rest
    there."""
    label = _guard_label(transition)
    ops = plan.ops if plan is not None else None
    # a plan that is one assign of one computed key (a counter, a value from the event): run
    # without the loop over its ops
    single = _single_assign(plan) if plan is not None else None
    kind, key, compute = single if single is not None else ("", "", None)
    target = plan.target if plan is not None else None
    transitions = plan.transitions if plan is not None else ()
    checks = plan is not None and checks_retries and bool(plan.exits or plan.target.has_always)
    onward: Take | None = plan.target.eventless.take \
        if plan is not None and plan.target.has_always else None
    emits = plan is not None and plan.emits
    # an assign makes a new context: a plan that assigns and stays makes a new snapshot
    settles = onward is None and ops is not None and any(op[3] is not None for op in ops)

    def go(snapshot: Snapshot, context: FrozenDict, event: FrozenDict,
           effects: list[fx.Effect] | None, trace: Trace | None
           ) -> tuple[Snapshot, tuple[fx.Effect, ...]] | None:
        if test is not None:
            try:
                passed = test(context, event)
            except Exception as exc:
                raise ImplementationError(label, exc) from exc
            if not passed:
                return otherwise(snapshot, context, event, effects, trace)
        if ops is None or (checks and snapshot.retry_records):
            return None  # the full step (it closes the records of retried states it exits)
        if trace is not None:
            trace.append((event, transitions))
        if compute is not None:
            try:
                value = compute(context, event)
            except Exception as exc:
                raise ImplementationError(f"action '{kind}'", exc) from exc
            fresh = {**context}  # a plain dict: FrozenDict copies it by dict's fastest path
            # the bounds: see frozen.INT_MAX
            fresh[key] = value if (type(value) is int and value <= 0x3FFFFFFF and
                                   value >= -0x3FFFFFFF) or as_is(value) else freeze(value, key)
            context = FrozenDict(fresh)
            if onward is None:  # the tail below, for a context known to be new
                return replace(snapshot, configuration=target, context=context), \
                    tuple(effects) if effects else NO_EFFECTS
        else:
            if emits and effects is None:
                effects = []
            for action, params, fn, items in ops:
                if items is None:  # a user action: run by the runtime, seeing this context
                    effects.append(RunAction(action, params, context, event, fn))  # type: ignore[union-attr]
                    continue
                fresh = {**context}
                try:
                    for name, item, computed in items:
                        if computed:
                            item = item(context, event)
                            if not (type(item) is int and item <= 0x3FFFFFFF and
                                    item >= -0x3FFFFFFF) and not as_is(item):
                                item = freeze(item, name)
                        fresh[name] = item
                except StatechartError:
                    raise
                except Exception as exc:
                    raise ImplementationError(f"action '{action}'", exc) from exc
                context = FrozenDict(fresh)
            if settles:  # the tail below, for a context known to be new
                return replace(snapshot, configuration=target, context=context), \
                    tuple(effects) if effects else NO_EFFECTS
        if onward is not None:
            return onward(snapshot, context, event, effects, trace)
        # _at_rest, written out: one call fewer on every event
        done = tuple(effects) if effects else NO_EFFECTS
        if context is snapshot.context:
            if target is snapshot.configuration:
                return snapshot, done
            return replace(snapshot, configuration=target), done
        return replace(snapshot, configuration=target, context=context), done
    return go


def _single_assign(plan: Plan) -> tuple[str, str, Callable[..., Any]] | None:
    """``(action type, key, value function)`` when ``plan`` does nothing but one ``assign``
    of one computed key whose op compiled; else None."""
    if plan.ops is None or len(plan.ops) != 1:
        return None
    action, _, _, items = plan.ops[0]
    if items is None or len(items) != 1 or not items[0][2]:
        return None
    (key, value, _), = items
    return (action, key, value)


def _at_rest(snapshot: Snapshot, context: FrozenDict, event: FrozenDict,
             effects: list[fx.Effect] | None, trace: Trace | None, *,
             configuration: Configuration) -> tuple[Snapshot, tuple[fx.Effect, ...]]:
    """No choice of a route was taken: the machine rests in ``configuration``."""
    done = tuple(effects) if effects else NO_EFFECTS
    if context is snapshot.context:
        if configuration is snapshot.configuration:
            return snapshot, done
        return replace(snapshot, configuration=configuration), done
    return replace(snapshot, configuration=configuration, context=context), done


def _guard_label(transition: Transition | None) -> str:
    if transition is None or transition.guard is None:
        return ""
    return f"guard '{transition.guard.type}' at {transition.config_path}"


UNKNOWN: Any = NOT_COMPILED
"""What ``configuration.routes`` holds for an event type not looked at yet (and
``configuration.eventless`` before it is compiled)."""


def first_enabled(candidates: Iterable[Transition], step: Step,
                  event: FrozenDict) -> Transition | None:
    """The first candidate, in priority order, whose guard passes."""
    for transition in candidates:
        guard = transition.guard
        if guard is None:
            return transition
        try:
            test = transition.guard_fn
            if test(step.context, event) if test is not None else \
                    guard.evaluate(step.context, event, step):
                return transition
        except ImplementationError as exc:
            raise ImplementationError(f"{exc.where} at {transition.config_path}",
                                      exc.cause) from exc
        except Exception as exc:  # a user guard called directly failed
            raise ImplementationError(f"guard '{guard.type}' at {transition.config_path}",
                                      exc) from exc
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
    """Take ``transitions`` together: exit, transition actions, enter, as their plan says.
    Returns whether the configuration, context or history changed."""
    if not transitions:
        return False
    step.microsteps += 1
    plan = step.configuration.plans.get(  # type: ignore[union-attr]
        transitions[0] if len(transitions) == 1 else tuple(transitions)) if step.plans else None
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
    return bool(plan.exits or plan.entries) or step.context is not context or \
        step.history is not history or step.retries is not retries


class Plan:
    """What a microstep does, given the configuration and the transitions it takes: the
    transitions left after conflicts, the states exited (innermost first) and the history
    they record, the states entered (document order), and the configuration reached.

    None of it depends on context or event data, so a plan is computed once by the functions
    below (SCXML's exit and entry sets) and kept on its configuration; guards and action
    bodies still run every time. Plans that go through a history state are computed afresh
    each time (where they lead depends on what the history holds)."""

    __slots__ = ("_ops", "emits", "entries", "exits", "observes_nodes", "reads_history",
                 "recorded", "remaining", "target", "targetless", "transitions")

    def __init__(self, transitions: tuple[Transition, ...], exits: tuple[StateNode, ...],
                 recorded: Mapping[str, tuple[StateNode, ...]], entries: tuple[StateNode, ...],
                 remaining: frozenset[StateNode], target: Configuration) -> None:
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
            n.initial is not None and n.initial.type == HISTORY for n in entries)
        # entering a final state, and some built-ins (``enqueue_actions``' check, SCXML's
        # In()), look at the active states while the microstep runs: keep them exact then
        self.observes_nodes = any(n.type == FINAL for n in entries) or any(
            _reads_configuration(a) for a in _plan_actions(exits, transitions, entries))
        # whether the compiled actions make effects (user actions), or only change the context
        self.emits = any(not isinstance(a.impl, BuiltinAction)
                         for a in _plan_actions(exits, transitions, entries))
        self._ops: Any = NOT_COMPILED

    @property
    def ops(self) -> tuple[Op, ...] | None:
        """The whole microstep as compiled actions (``Op``), for a route to run; None where
        the states exited or entered bring more than actions (timers, invocations, retried
        calls, final states, built-ins that read the configuration) or an action does not
        compile. Compiled when a route first asks (the full step never does)."""
        if self._ops is NOT_COMPILED:
            plain = not self.observes_nodes and not any(
                n.after_timers or n.invoke or n.retry is not None or
                n.retry_attempt_of is not None for n in (*self.exits, *self.entries))
            ops = [compile_action(a) for a in
                   _plan_actions(self.exits, self.transitions, self.entries)] if plain else [None]
            self._ops = None if None in ops else tuple(ops)
        return self._ops  # type: ignore[no-any-return]


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
        if step.plans and not plan.reads_history and \
                len(configuration.plans) < PLANS_PER_CONFIGURATION:
            configuration.plans[key] = plan
    return plan


def compute_plan(configurations: Configurations, configuration: Configuration,
                 transitions: list[Transition], history: Mapping[str, tuple[StateNode, ...]]
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
    target = configurations.of_nodes(remaining | to_enter) if exits or to_enter else \
        configuration
    return Plan(tuple(kept), exits, recorded, tuple(sorted(to_enter, key=_order)), remaining,
                target)


def run_plan(step: Step, plan: Plan, event: FrozenDict) -> None:
    """Exit, run the transitions' actions, enter, as ``plan`` says, ending in its target.
    (A plan's compiled actions, ``plan.ops``, are its route's to run: see ``compose_choice``.)"""
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
        _close_retry_records(step, plan.remaining)
    completed: set[StateNode] = set()
    for node in plan.entries:
        if nodes is not None:
            nodes.add(node)
        enter_state(step, node, event)
        if node.type == FINAL:
            _complete(step, node, event, completed)
    step.configuration = plan.target
    step.nodes = plan.target.node_set


def _plan_actions(exits: Iterable[StateNode], transitions: Iterable[Transition],
                  entries: Iterable[StateNode]) -> Iterable[ActionSpec]:
    for node in exits:
        yield from node.exit
    for transition in transitions:
        yield from transition.actions
    for node in entries:
        yield from node.entry


def _reads_configuration(action: ActionSpec) -> bool:
    """True for built-ins that may look at the active states while they run."""
    impl = action.impl
    return isinstance(impl, BuiltinAction) and not isinstance(impl, _BLIND_BUILTINS)


_BLIND_BUILTINS = (Assign, Raise, EmitAction, LogAction, SendToAction, SendParentAction,
                   ForwardTo, Cancel, SpawnChild, StopChild, RecordFailure, RecordSkip)


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


def _close_retry_records(step: Step, remaining: AbstractSet[StateNode]) -> None:
    """Forget the retry records of retried states just exited (after the transition's own
    actions, which may still read them: ``recordSkip``)."""
    by_id = step.definition.by_id
    kept = {k: v for k, v in step.retries.items() if k == VISITS or by_id[k] in remaining}
    if len(kept) != len(step.retries):
        step.retries = FrozenDict(kept)


def record_history(to_exit: Iterable[StateNode], nodes: AbstractSet[StateNode],
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
    key, attempt = _count_attempt(step, node)
    run_actions(step, node.entry, event)
    for timer_event, delay in node.after_timers:
        step.event = event
        step.schedule(timer_event, normalize_event(timer_event), delay, None)
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
    root = step.definition.root
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


Op = tuple[str, FrozenDict, Any, "tuple[tuple[str, Any, bool], ...] | None"]
"""A compiled action, as data its route runs (``compose_choice``): ``(type, params, fn,
None)`` for a user action (a ``RunAction`` of ``fn``), ``(type, EMPTY, None, items)`` for an
``assign`` of a mapping, ``items`` its ``(key, value, computed)`` with constant values frozen."""


def compile_action(action: ActionSpec) -> Op | None:
    """``action`` as what ``run_actions`` does with it, for the common kinds (a user action
    without computed params; an ``assign`` of a mapping with string keys and storable
    constants); None for the others, which need the ``Step``."""
    impl, params = action.impl, action.params
    if callable(params):
        return None
    if not isinstance(impl, BuiltinAction):
        return (action.type, params or EMPTY, impl, None)
    if params or type(impl) is not Assign or not isinstance(impl.assignment, Mapping):
        return None
    items = []
    for key, value in impl.assignment.items():
        if type(key) is not str or text_problem(key) is not None:
            return None  # the step reports the bad key when the assign runs
        computed = callable(value)
        if not computed:
            try:
                value = freeze(value, key)
            except StatechartError:
                return None  # likewise the bad value
        items.append((key, value, computed))
    return (action.type, EMPTY, None, tuple(items))


def _order(node: StateNode) -> int:
    return node.order


def _due_order(timers: dict[str, Timer] | None) -> tuple[Timer, ...]:
    return tuple(sorted(timers.values(), key=lambda t: (t.due_at, t.id))) if timers else ()
