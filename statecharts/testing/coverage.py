"""Coverage of a machine: which states were active and which transitions were taken.

A ``CoverageRecorder`` is fed snapshots and microstep traces (by the graph explorer, the
harness or the pytest plugin); ``report()`` compares what it saw with everything the machine
defines. States are named by dotted path from the root (``"payment.retrying"``), transitions by
their config path (``"states.payment.on.PAY[0]"``), so a report points at the line to look at.

A state entered and left within one macrostep (an eventless pass-through such as a validation
state with only ``always`` transitions) counts as visited: ``macrostep`` replays the traced
microsteps with the engine's own entry/exit-set functions to see every state they entered.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..algorithm import add_descendants, compute_entry_set, compute_exit_set, record_history
from ..machine import Machine
from ..nodes import HISTORY, StateNode, Transition
from ..snapshot import Snapshot

Trace = Iterable[tuple[Any, Iterable[Transition]]]


def state_name(node: StateNode) -> str:
    """A state's dotted path from the root (``"(root)"`` for the root itself)."""
    return ".".join(node.path) or "(root)"


def transition_name(transition: Transition) -> str:
    """A transition's config path, e.g. ``states.idle.on.GO[0]`` (``always`` ones included)."""
    return transition.config_path


def all_states(machine: Machine) -> tuple[str, ...]:
    """Every state a configuration can contain, root and history states excluded."""
    return tuple(
        state_name(n)
        for n in machine.definition.nodes
        if n.parent is not None and n.type != HISTORY
    )


def all_transitions(machine: Machine) -> tuple[str, ...]:
    """Every transition the machine defines, in document order."""
    return tuple(
        transition_name(t) for n in machine.definition.nodes for t in (*n.transitions, *n.always)
    )


@dataclass
class CoverageReport:
    """What was reached against what exists, for one machine."""

    machine_id: str
    states: tuple[str, ...]
    transitions: tuple[str, ...]
    states_reached: frozenset[str]
    transitions_taken: frozenset[str]
    variant: str = ""
    """Which definition, when the session ran several of one machine id that differ in their
    states or transitions (e.g. " (fingerprint 1a2b3c4d5e6f)")."""

    @property
    def unreached_states(self) -> tuple[str, ...]:
        """States never active, in document order."""
        return tuple(s for s in self.states if s not in self.states_reached)

    @property
    def untaken_transitions(self) -> tuple[str, ...]:
        """Transitions never taken, in document order."""
        return tuple(t for t in self.transitions if t not in self.transitions_taken)

    @property
    def complete(self) -> bool:
        """True when every state was active and every transition taken."""
        return not self.unreached_states and not self.untaken_transitions

    def format(self) -> str:
        """A short human-readable report."""
        reached = len(self.states) - len(self.unreached_states)
        taken = len(self.transitions) - len(self.untaken_transitions)
        lines = [
            f"machine {self.machine_id!r}{self.variant}: states {reached}/{len(self.states)}, "
            f"transitions {taken}/{len(self.transitions)}"
        ]
        lines += [f"  never active: {s}" for s in self.unreached_states]
        lines += [f"  never taken:  {t}" for t in self.untaken_transitions]
        return "\n".join(lines)


@dataclass
class CoverageRecorder:
    """Accumulates coverage for one machine (identified by its fingerprint)."""

    machine: Machine
    states_reached: set[str] = field(default_factory=set)
    transitions_taken: set[str] = field(default_factory=set)

    def snapshot(self, snapshot: Snapshot) -> None:
        """Record the states active in ``snapshot``."""
        for node in snapshot.configuration.nodes:
            if node.parent is not None:
                self.states_reached.add(state_name(node))

    def trace(self, trace: Trace) -> None:
        """Record the transitions of a microstep trace (``machine.step(..., trace=[])``)."""
        for _, transitions in trace:
            for transition in transitions:
                self.transitions_taken.add(transition_name(transition))

    def macrostep(self, before: Snapshot | None, trace: Trace, after: Snapshot) -> None:
        """Record one macrostep: from ``before`` (None: the machine's start) through the traced
        microsteps to ``after``, counting the states entered and left on the way."""
        steps = [(e, tuple(ts)) for e, ts in trace]
        self.trace(steps)
        for node in entered_states(self.machine, before, steps):
            if node.parent is not None and node.type != HISTORY:
                self.states_reached.add(state_name(node))
        self.snapshot(after)

    def merge(self, other: CoverageRecorder) -> None:
        """Add what ``other`` recorded."""
        self.states_reached |= other.states_reached
        self.transitions_taken |= other.transitions_taken

    def report(self) -> CoverageReport:
        """The report of what was recorded so far."""
        return CoverageReport(
            self.machine.id,
            all_states(self.machine),
            all_transitions(self.machine),
            frozenset(self.states_reached),
            frozenset(self.transitions_taken),
        )


def entered_states(
    machine: Machine, before: Snapshot | None, trace: Iterable[tuple[Any, tuple[Transition, ...]]]
) -> set[StateNode]:
    """Every state a macrostep entered (even if it left it again before settling): the
    initial entry when ``before`` is None, then each traced microstep's entry set, computed
    by the algorithm's own functions against the configuration and history as they evolve."""
    entered: set[StateNode] = set()
    if before is None:
        nodes = {machine.root}
        add_descendants(machine.root, {}, set(), nodes)
        entered |= nodes
        history: Any = {}
    else:
        nodes = set(before.configuration.nodes)
        history = before.history_nodes  # the nodes, not the ids the public property gives
    for _, transitions in trace:
        if not any(t.targets for t in transitions):
            continue  # targetless: enters and exits nothing
        exiting = sorted(
            compute_exit_set(transitions, nodes, history), key=lambda n: n.order, reverse=True
        )
        history = record_history(exiting, nodes, history)
        nodes -= set(exiting)
        to_enter: set[StateNode] = set()
        compute_entry_set(transitions, history, set(), to_enter)
        nodes |= to_enter
        entered |= to_enter
    return entered
