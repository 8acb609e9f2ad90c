"""Every known way this engine (XState v5 semantics) and python-statemachine 3.2.2
(``StateChart``, SCXML semantics plus its own choices) legitimately differ, in one place.

Each difference is either

* ``mapped``: the translation in ``psm_adapter.py`` writes the XState construct in the form
  that means the same thing to python-statemachine, so the run is still compared in full; or
* ``excluded``: the oracle detects, by the rule's ``applies`` check, the step where it matters
  and stops comparing that run there (or, for ``logs_only``, leaves the named states out of
  the entry/exit comparison of that step). Each exclusion is counted and the test requires
  that most runs are compared in full, so a rule cannot quietly swallow the oracle.

Nothing else is tolerated: any other mismatch fails the test.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from statecharts import algorithm
from statecharts.frozen import FrozenDict
from statecharts.nodes import COMPOUND, HISTORY, PARALLEL, StateNode, Transition
from statecharts.snapshot import Snapshot


@dataclass(frozen=True)
class KnownDifference:
    """One documented semantic difference and how the oracle treats it."""

    name: str
    treatment: str  # "mapped" | "excluded" | "logs_only"
    source: str  # "XState vs SCXML" | "python-statemachine"
    description: str


DIFFERENCES = {
    d.name: d
    for d in [
        KnownDifference(
            "root_is_a_state",
            "mapped",
            "python-statemachine",
            "python-statemachine has no root state: a top-level final state terminates it and a "
            "completed top-level parallel state terminates it too, and it cannot hold transitions "
            "on the root. The XState root is therefore translated as an explicit compound state "
            "'m' holding the whole machine.",
        ),
        KnownDifference(
            "psm_document_order",
            "mapped",
            "python-statemachine",
            "python-statemachine 3.2.2 numbers document_order wrongly below a compound state (its "
            "recursive numbering does not carry the counter back up), so e.g. a state in a later "
            "parallel region can be exited before a deeper state of an earlier one. The adapter "
            "renumbers document_order in pre-order after building the class; the algorithm is "
            "untouched.",
        ),
        KnownDifference(
            "psm_selection_order",
            "mapped",
            "python-statemachine",
            "python-statemachine 3.2.2 selects transitions for the atomic states in the order they "
            "were entered, not in document order (its source says 'TODO: sorted by document "
            "order'); with parallel regions this changes which conflicting transition wins and the "
            "order transition actions run in. The adapter's engine subclass sorts them, as the "
            "SCXML algorithm specifies.",
        ),
        KnownDifference(
            "psm_repeated_callback",
            "mapped",
            "python-statemachine",
            "python-statemachine runs a callback named twice in one list (actions=['inc', 'inc']) "
            "only once; XState runs both. The adapter names the repeats as aliases (inc_2).",
        ),
        KnownDifference(
            "self_transition_atomic",
            "mapped",
            "python-statemachine",
            "An XState self-transition without reenter on an atomic state exits and enters "
            "nothing. python-statemachine's internal self-transition enters the state (and its "
            "ancestors) again without exiting them (enable_self_transition_entries), and an "
            "external one exits and re-enters; the translation is a targetless transition.",
        ),
        KnownDifference(
            "self_transition_compound",
            "mapped",
            "XState vs SCXML",
            "An XState self-transition without reenter on a compound state exits its descendants "
            "and enters its initial state, keeping the state itself; in SCXML that is an internal "
            "transition to the initial child, which is the translation.",
        ),
        KnownDifference(
            "internal_means_no_reentry",
            "mapped",
            "XState vs SCXML",
            "XState's default (reenter: false) transition from a compound state to its descendant "
            "is SCXML's type='internal'; reenter: true, and every transition leaving the source's "
            "subtree, is SCXML's external transition.",
        ),
        KnownDifference(
            "history_default",
            "mapped",
            "python-statemachine",
            "A python-statemachine history state without a default transition enters nothing "
            "when it has no recorded value; XState enters the parent's initial state. The "
            "translation always writes the default transition.",
        ),
        KnownDifference(
            "final_exits_on_done",
            "mapped",
            "XState vs SCXML",
            "When the machine reaches a top-level final state XState runs the exit actions of "
            "every active state (as SCXML's exitInterpreter does); python-statemachine does not. "
            "The oracle checks that those trailing exits are exactly the final configuration in "
            "reverse document order, then compares the rest of the log.",
        ),
        KnownDifference(
            "parallel_transition_domain",
            "logs_only",
            "XState vs SCXML",
            "XState's transition domain is the least common ancestor, which may be a parallel "
            "state; SCXML uses the least common *compound* ancestor, so it also exits and "
            "re-enters the parallel state (and any parallel ancestors below that compound one). "
            "Same configuration afterwards; the oracle leaves those states out of that step's "
            "entry/exit comparison. When one of them has entry/exit actions or a history child, "
            "the context or the recorded history differ from there on (and guards in the same "
            "macrostep may then choose differently), so the run stops before that step.",
        ),
        KnownDifference(
            "parallel_selection",
            "excluded",
            "XState vs SCXML",
            "XState selects per region, innermost first, and tries a state's own transitions "
            "only when none of its active descendants took the event, so once one region takes "
            "the event no ancestor of the parallel state is tried, even if that region's "
            "transition is then dropped by conflict resolution. SCXML selects per atomic state, "
            "so a region without a transition reaches the ancestor's transition; it may survive "
            "conflict resolution (a targetless one always does). The oracle computes SCXML's "
            "selection for the event (per atomic state in document order, guards on the same "
            "context, conflicts removed with SCXML's exit sets) and stops the run at an event "
            "where it differs from the engine's.",
        ),
        KnownDifference(
            "history_reenters_active_state",
            "excluded",
            "XState",
            "A transition to a history state can make XState v5 enter a state that is still "
            "active, with no exit: the history's states are added with their ancestors up to the "
            "history's parent, while the transition's domain (computed on the history's resolved "
            "states) may keep some of those ancestors active. Two shapes seen: the history "
            "resolves to the transition's own source (domain = source, the source is entered "
            "again), and a deep history resolves to a state beside the source in a common "
            "ancestor below the history's parent. python-statemachine exits and re-enters instead "
            "(its deep history also records compound states). The engine follows XState; "
            "tests/differential/test_regressions.py keeps xfail(strict) tests for both shapes. "
            "The oracle detects the symptom (the engine's log enters an active state) and stops "
            "the run there if a history target was taken, and fails otherwise.",
        ),
        KnownDifference(
            "psm_history_default_repeats_actions",
            "excluded",
            "python-statemachine",
            "python-statemachine 3.2.2 puts the triggering transition itself into a history "
            "state's default content (default_history_content[parent] = [info]), so when a "
            "transition targets a history state its actions can run a second time as the "
            "history's parent is entered. SCXML runs only the history's default transition "
            "content. The oracle stops the run at a step taking such a transition with actions.",
        ),
        KnownDifference(
            "eventless_loop",
            "excluded",
            "XState vs SCXML",
            "A machine whose eventless transitions or done events never settle: the engine raises "
            "InfiniteLoopError, SCXML interpreters loop forever. The run stops there.",
        ),
    ]
}


def parallel_gap(transitions: Iterable[Transition], histories: Iterable[Any]) -> set[StateNode]:
    """Rule ``parallel_transition_domain``: the states SCXML additionally exits and re-enters
    for ``transitions`` (the parallel domain and its ancestors below the nearest compound
    one). Domains are computed against each recorded history the step saw."""
    gap: set[StateNode] = set()
    for transition in transitions:
        if not transition.targets:
            continue
        for history in histories:
            domain = algorithm.transition_domain(transition, history)
            node = domain
            while node is not None and node.type == PARALLEL:
                gap.add(node)
                node = node.parent
    return gap


class _Scope:
    """What a guard may ask (``in_state``), for evaluating guards outside a step."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def in_state(self, state_id: str) -> bool:
        node = self.snapshot.machine.definition.by_id.get(state_id)
        return node is not None and node in self.snapshot.configuration.node_set


def _scxml_exit_set(
    transition: Transition, nodes: AbstractSet[StateNode], history: Any
) -> set[StateNode]:
    """SCXML's exit set, with the XState transition written as psm_adapter translates it."""
    if not transition.targets:
        return set()
    source = transition.source
    targets = algorithm.effective_targets(transition, history)
    inside = all(t is not source and source in t.ancestors for t in targets)
    if not transition.reenter and targets == [source] and source.is_atomic:
        return set()  # translated to a targetless transition
    if not transition.reenter and source.type == COMPOUND and (inside or targets == [source]):
        domain: StateNode | None = source  # SCXML internal transition
    else:
        domain = next(
            (
                a
                for a in source.ancestors
                if a.type == COMPOUND and all(a in t.ancestors for t in targets)
            ),
            None,
        )
    return {n for n in nodes if domain is None or domain in n.ancestors}


def scxml_selection(snapshot: Snapshot, event: FrozenDict) -> list[Transition]:
    """The transitions SCXML's selectTransitions takes for ``event`` in ``snapshot``."""
    nodes = snapshot.configuration.node_set
    scope = _Scope(snapshot)
    enabled: list[Transition] = []
    for atomic in sorted((n for n in nodes if n.is_atomic), key=lambda n: n.order):
        for state in (atomic, *atomic.ancestors):
            found = next(
                (
                    t
                    for t in state.candidates(event["type"])
                    if t.guard is None or t.guard.evaluate(snapshot.context, event, scope)
                ),
                None,
            )
            if found is not None:
                if found not in enabled:
                    enabled.append(found)
                break
    kept: list[Transition] = []
    for t1 in enabled:
        exits1 = _scxml_exit_set(t1, nodes, snapshot.history_nodes)
        beaten = []
        preempted = False
        for t2 in kept:
            if exits1 & _scxml_exit_set(t2, nodes, snapshot.history_nodes):
                if t2.source in t1.source.ancestors:  # t1 is the more specific one
                    beaten.append(t2)
                else:
                    preempted = True
                    break
        if not preempted:
            kept = [t for t in kept if t not in beaten]
            kept.append(t1)
    return kept


def selection_differs(
    snapshot: Snapshot, event: FrozenDict, trace: list[tuple[FrozenDict, tuple[Transition, ...]]]
) -> bool:
    """Rule ``parallel_selection``: the engine's transitions for the external ``event`` (the
    first microstep in ``trace``, if it is that event's) are not SCXML's."""
    engine = list(trace[0][1]) if trace and trace[0][0] is event else []
    return set(engine) != set(scxml_selection(snapshot, event))


def entered_while_active(active: set[str], log: Iterable[tuple[str, str]]) -> str | None:
    """The first state the log enters while it is active (``active``: keys before the step),
    or None."""
    current = set(active)
    for kind, key in log:
        if kind == "enter":
            if key in current:
                return key
            current.add(key)
        else:
            current.discard(key)
    return None


def history_reenters(
    transitions: Iterable[Transition], nodes: AbstractSet[StateNode], history: Any
) -> bool:
    """Rule ``history_reenters_active_state`` predicted from the definition: a history target
    whose restored states, or their ancestors below the history's parent, are active and not
    in the transition's exit set (``nodes``/``history`` as before the step)."""
    for transition in transitions:
        exits: set[StateNode] | None = None
        for target in transition.targets:
            if target.type != HISTORY:
                continue
            if exits is None:
                exits = set(algorithm.compute_exit_set([transition], nodes, history))
            restored = history.get(target.id) or algorithm.history_default(target)
            for state in restored:
                chain = [state, *algorithm.proper_ancestors(state, target.parent)]
                if any(n in nodes and n not in exits for n in chain):
                    return True
    return False


def history_default_with_actions(transitions: Iterable[Transition]) -> bool:
    """Rule ``psm_history_default_repeats_actions`` applies: a transition with actions
    targets a history state."""
    return any(t.actions and t.has_history_target for t in transitions)
