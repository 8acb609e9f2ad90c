"""The compiled form of the algorithm: routes, taken instead of the full step where they can be.

``algorithm.py`` is the reference: selection, plans, microsteps, read beside the SCXML spec.
This module compiles what of it is simple for one configuration and one event type into one
function (a *route*) that needs no ``Step``: the candidate transitions' plain guards as a chain,
each plan's actions as data (``Op``; an assign by ``frozen.merger``, the merge the full step's
``frozen_update`` does) run on the context, the eventless route of the configuration reached,
the new snapshot by ``msgspec.structs.replace``. Closures over these
facts, never generated source; each is kept on its configuration (facts of the definition).

``take`` is the one entry: ``Machine.transition``, ``Machine.step`` and ``Actor.send`` each call
the route kept on the configuration for the event's type, or ``take`` (which compiles and keeps
it) where there is none yet, and run the full step (``algorithm.macrostep``) when it returns
None. Results
are identical either way (``machine.plans = False`` runs the reference; the property tests
compare the two).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from msgspec.structs import replace

from . import effects as fx
from .actions import ActionSpec, Assign, BuiltinAction
from .algorithm import PLANS_PER_CONFIGURATION, Plan, compute_plan, select_in
from .configuration import NOT_COMPILED, Configuration, Configurations
from .effects import NO_EFFECTS, RunAction
from .errors import ImplementationError, StatechartError
from .frozen import EMPTY, FrozenDict, Merge, merger
from .nodes import Transition
from .retrying import is_retry_part
from .snapshot import Snapshot

Result = tuple[Snapshot, tuple[fx.Effect, ...]]
Trace = list[tuple[FrozenDict, tuple[Transition, ...]]]
Take = Callable[
    [Snapshot, FrozenDict, FrozenDict, "list[fx.Effect] | None", "Trace | None"], "Result | None"
]
"""A composed route or choice: ``(snapshot, context, event, effects, trace)`` -> the snapshot
after the event and its effects (None: the full step). ``context`` and ``effects`` are what
the microsteps before it made (``effects`` None until one emits)."""

Op = tuple[str, FrozenDict, Any, "Merge | None"]
"""A compiled action, as data its route runs (``compose_choice``): ``(type, params, fn,
None)`` for a user action (a ``RunAction`` of ``fn``), ``(type, EMPTY, None, merge)`` for an
``assign`` of a mapping (``frozen.merger``: its new context from the context and event)."""

Direct = tuple[Plan, tuple[Op, ...]]
"""A plan a route can run itself, with its actions compiled."""

Choice = tuple[Transition | None, Any, "Direct | None"]
"""One candidate of a route: its transition (None: an unguarded selection), its plain guard
function (None: none), its direct plan (None: the full step takes it)."""

UNKNOWN: Any = NOT_COMPILED
"""What ``configuration.eventless`` holds before it is compiled."""


def full_step(
    snapshot: Snapshot,
    context: FrozenDict,
    event: FrozenDict,
    effects: list[fx.Effect] | None,
    trace: Trace | None,
) -> None:
    """What ``configuration.routes`` keeps for an event type no route takes there: the full
    step takes it."""
    return None


def take(
    snapshot: Snapshot,
    context: FrozenDict,
    event: FrozenDict,
    effects: list[fx.Effect] | None,
    trace: Trace | None,
) -> Result | None:
    """The one entry of the compiled form, for an event whose type has no route kept in its
    configuration yet: the route compiled, kept (facts of the definition) and taken.

    ``Machine.transition``, ``Machine.step`` and ``Actor.send`` each take an event of type
    ``kind`` by ``snapshot.configuration.routes.get(kind, take)(snapshot, snapshot.context,
    event, None, trace)``: one lookup and one call, the kept route or this. They run the full
    step (``algorithm.macrostep``) where it returns None. The caller has checked that the
    snapshot is active and that plans are on; with a ``trace`` list each microstep appends
    ``(event, transitions)`` to it, as the full step does."""
    configuration = snapshot.configuration
    kind = event["type"]
    route = _compile_route(snapshot.machine.configurations, configuration, kind)
    found: Take = route.take if route is not None else full_step
    if len(configuration.routes) < PLANS_PER_CONFIGURATION:
        configuration.routes[kind] = found
    return found(snapshot, context, event, effects, trace)


class Route:
    """How events of one type are taken in one configuration, compiled: the candidate
    transitions in priority order, each with its guard (a user function called directly, or
    none) and its plan when that plan is nothing but compiled actions and a change of
    configuration (None: take the full step). Exists only where selection is this simple:
    a single-chain configuration whose guards are all plain user functions, or any
    configuration where no guard decides; not for the engine's own events, nor where an
    eventless transition could follow.

    ``take`` is the route composed into one function (closures over these facts, see
    ``compose_route``)."""

    __slots__ = ("choices", "take")

    def __init__(
        self, choices: tuple[Choice, ...], configuration: Configuration, checks_retries: bool
    ) -> None:
        self.choices = choices
        self.take: Take = compose_route(choices, configuration, checks_retries)


def _compile_route(
    configurations: Configurations, configuration: Configuration, kind: str
) -> Route | None:
    if kind.startswith("xstate.") or configuration.has_always:
        return None
    if configuration.chain is not None:
        choices: list[Choice] = []
        for transition in configuration.chain_candidates(kind):
            if transition.guard is not None and transition.guard_fn is None:
                return None  # a guard that needs the step (combinators, stateIn, params)
            choices.append(
                (
                    transition,
                    transition.guard_fn,
                    _direct_plan(configurations, configuration, [transition]),
                )
            )
            if transition.guard is None:
                break  # the candidates after an unguarded one are never taken
        return Route(tuple(choices), configuration, True)
    if any(t.guard is not None for n in configuration.nodes for t in n.candidates(kind)):
        return None
    selected: list[Transition] = []
    select_in(
        configurations.root,
        configuration.node_set,
        kind,
        lambda candidates: candidates[0] if candidates else None,
        selected,
    )
    if not selected:
        return Route((), configuration, True)
    return Route(
        ((None, None, _direct_plan(configurations, configuration, selected)),), configuration, True
    )


def _direct_plan(
    configurations: Configurations,
    configuration: Configuration,
    transitions: list[Transition],
    seen: frozenset[Configuration] = frozenset(),
) -> Direct | None:
    """The plan of ``transitions`` with its compiled actions when it can run without a
    ``Step``: only compiled actions, no history recorded or read, and the eventless
    transitions after it compiled too."""
    if any(t.has_history_target for t in transitions):
        return None
    key: Any = transitions[0] if len(transitions) == 1 else tuple(transitions)
    plan = configuration.plans.get(key)
    if plan is None:
        plan = compute_plan(configurations, configuration, transitions, EMPTY)
        if plan.reads_history:
            return None
        configuration.plans[key] = plan
    if plan.recorded:
        return None
    ops = plan_ops(plan)
    if ops is None:
        return None
    if plan.target.has_always and (
        plan.target in seen  # not back round a loop
        or eventless_route(configurations, plan.target, seen) is None
    ):
        return None
    return plan, ops


def plan_ops(plan: Plan) -> tuple[Op, ...] | None:
    """The whole microstep of ``plan`` as compiled actions (``Op``), for a route to run; None
    where the states exited or entered bring more than actions (timers, invocations, retried
    calls, final states, built-ins that read the configuration) or an action does not
    compile."""
    if plan.observes_nodes or any(
        n.after_timers or n.invoke or is_retry_part(n) for n in (*plan.exits, *plan.entries)
    ):
        return None
    ops = [compile_action(action) for action in plan.actions()]
    return None if None in ops else tuple(ops)  # type: ignore[arg-type]


def eventless_route(
    configurations: Configurations,
    configuration: Configuration,
    seen: frozenset[Configuration] = frozenset(),
) -> Route | None:
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


def _compile_eventless(
    configurations: Configurations, configuration: Configuration, seen: frozenset[Configuration]
) -> Route | None:
    if configuration.chain is None:
        return None
    choices: list[Choice] = []
    for transition in (t for node in configuration.chain for t in node.always):
        if (transition.guard is not None and transition.guard_fn is None) or not transition.targets:
            return None
        direct = _direct_plan(configurations, configuration, [transition], seen)
        if direct is None:
            return None
        choices.append((transition, transition.guard_fn, direct))
        if transition.guard is None:
            break
    return Route(tuple(choices), configuration, False)


def compose_route(
    choices: tuple[Choice, ...], configuration: Configuration, checks_retries: bool
) -> Take:
    """``choices`` as one function: a chain in priority order, each choice testing its guard
    and, when it fails, handing over to the next; after the last the machine rests in
    ``configuration``. The first choice is the route itself, so an event whose first guard
    passes costs no dispatch. An event's route (``checks_retries``: taken in
    ``configuration``, not on the way on from another) leaves to the full step the plans that
    must close retry records."""
    take: Take = partial(_at_rest, configuration=configuration)
    source = configuration if checks_retries else None
    for transition, test, direct in reversed(choices):
        take = compose_choice(transition, test, direct, take, source)
    return take


def compose_choice(
    transition: Transition | None,
    test: Any,
    direct: Direct | None,
    otherwise: Take,
    source: Configuration | None,
) -> Take:
    """One choice of a route as a function: its guard (``otherwise`` when it fails), then its
    direct plan (None: the full step): the compiled actions on the context (``Op``: each
    user action's ``RunAction``, each assign's new context by its ``frozen.merger``), then
    the eventless route of the configuration it reaches (compiled with it), or rest there.
    ``source`` is the configuration an event's route is taken in (None for an eventless
    route: the snapshot it gets is the one the event came to)."""
    plan, ops = direct if direct is not None else (None, None)
    # a plan that is one assign (a counter, a value from the event): run without the loop
    single = ops[0] if ops is not None and len(ops) == 1 and ops[0][3] is not None else None
    merge = single[3] if single is not None else None
    target = plan.target if plan is not None else None
    # what the rarer paths need, as one closure variable (each costs every call: about 27
    # instructions by callgrind): what a trace records, what an error names
    facts = (
        plan.transitions if plan is not None else (),
        _guard_label(transition),
        f"action '{single[0]}'" if single is not None else "",
    )
    checks = source is not None and plan is not None and bool(plan.exits or plan.target.has_always)
    onward: Take | None = (
        plan.target.eventless.take if plan is not None and plan.target.has_always else None
    )
    # an event's targetless assign: a new context and nothing else (no effects came before it)
    stays = merge is not None and source is not None and target is source

    def go(
        snapshot: Snapshot,
        context: FrozenDict,
        event: FrozenDict,
        effects: list[fx.Effect] | None,
        trace: Trace | None,
    ) -> Result | None:
        if test is not None:
            try:
                passed = test(context, event)
            except Exception as exc:
                raise ImplementationError(facts[1], exc) from exc
            if not passed:
                return otherwise(snapshot, context, event, effects, trace)
        if ops is None or (checks and snapshot.retry_records):
            return None  # the full step (it closes the records of retried states it exits)
        if trace is not None:
            trace.append((event, facts[0]))
        if merge is not None:
            try:
                context = merge(context, event)
            except StatechartError:
                raise  # a value no store holds, named by its key
            except Exception as exc:
                raise ImplementationError(facts[2], exc) from exc
            if stays:
                return replace(snapshot, context=context), NO_EFFECTS
        elif ops:  # (an empty loop costs as much as a check)
            for action, params, fn, assigns in ops:
                if assigns is None:  # a user action: run by the runtime, seeing this context
                    if effects is None:
                        effects = []
                    effects.append(RunAction(action, params, context, event, fn))
                    continue
                try:
                    context = assigns(context, event)
                except StatechartError:
                    raise
                except Exception as exc:
                    raise ImplementationError(f"action '{action}'", exc) from exc
        if onward is not None:
            return onward(snapshot, context, event, effects, trace)
        # _at_rest, written out: one call fewer on every event; a keyword fewer for
        # ``replace`` where the configuration stays (a targetless transition)
        done = tuple(effects) if effects else NO_EFFECTS
        if target is snapshot.configuration:
            if context is snapshot.context:
                return snapshot, done
            return replace(snapshot, context=context), done
        if context is snapshot.context:
            return replace(snapshot, configuration=target), done
        return replace(snapshot, configuration=target, context=context), done

    return go


def _at_rest(
    snapshot: Snapshot,
    context: FrozenDict,
    event: FrozenDict,
    effects: list[fx.Effect] | None,
    trace: Trace | None,
    *,
    configuration: Configuration,
) -> Result:
    """No choice of a route was taken: the machine rests in ``configuration``."""
    done = tuple(effects) if effects else NO_EFFECTS
    if configuration is snapshot.configuration:
        if context is snapshot.context:
            return snapshot, done
        return replace(snapshot, context=context), done
    if context is snapshot.context:
        return replace(snapshot, configuration=configuration), done
    return replace(snapshot, configuration=configuration, context=context), done


def _guard_label(transition: Transition | None) -> str:
    if transition is None or transition.guard is None:
        return ""
    return f"guard '{transition.guard.type}' at {transition.config_path}"


def compile_action(action: ActionSpec) -> Op | None:
    """``action`` as what ``algorithm.run_actions`` does with it, for the common kinds (a user
    action without computed params; an ``assign`` of a mapping with storable keys and
    constants, compiled by ``frozen.merger``); None for the others, which need the ``Step``."""
    impl, params = action.impl, action.params
    if callable(params):
        return None
    if not isinstance(impl, BuiltinAction):
        return (action.type, params or EMPTY, impl, None)
    if params or type(impl) is not Assign or not isinstance(impl.assignment, Mapping):
        return None
    try:
        merge = merger((k, v, callable(v)) for k, v in impl.assignment.items())
    except StatechartError:
        return None  # the step reports the bad key or value when the assign runs
    return (action.type, EMPTY, None, merge)
