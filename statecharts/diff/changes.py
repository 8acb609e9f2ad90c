"""What changed between two definitions of a machine, as data: one ``Change`` per fact a
reviewer should see ("state sending_email: retries up to 2 times → 4 times"), and the
``MachineDiff`` holding them with the state matching that the impact report builds on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..machine import Machine
from ..nodes import StateNode, Transition
from ..render.model import ADDED, CHANGED, REMOVED

__all__ = ["ADDED", "CHANGED", "REMOVED", "Change", "MachineDiff"]

# What a change is about (``Change.kind``).
STATE, RENAMED, MOVED, TYPE, INITIAL = "state", "renamed", "moved", "type", "initial"
TRANSITION, TARGET, GUARD, ACTIONS, TIMER = "transition", "target", "guard", "actions", "timer"
ENTRY, EXIT, TAGS, INVOKE, RETRY, BREAKER = "entry", "exit", "tags", "invoke", "retry", "breaker"
FAILURE, ERROR_WORKFLOW, CONTEXT, VERSION, MACHINE_ID = (
    "failure class",
    "error workflow",
    "context",
    "version",
    "machine id",
)
TRANSITION_KINDS = frozenset({TRANSITION, TARGET, GUARD, ACTIONS, TIMER})


@dataclass(frozen=True)
class Change:
    """One change. ``where`` is the state's path in the new machine (the old one for a removed
    state, "" for the workflow as a whole); ``text`` says it in words, a changed value as
    "old → new". The nodes and transitions it concerns are kept for drawing."""

    mark: str
    kind: str
    where: str
    text: str
    label: str | None = None  # the text drawn on its arrow, where the arrow says the rest
    old_node: StateNode | None = field(default=None, compare=False, repr=False)
    new_node: StateNode | None = field(default=None, compare=False, repr=False)
    old_transition: Transition | None = field(default=None, compare=False, repr=False)
    new_transition: Transition | None = field(default=None, compare=False, repr=False)

    @property
    def drawn(self) -> str:
        """The words the diagram shows for this change."""
        return self.label if self.label is not None else self.text

    @property
    def on_transition(self) -> bool:
        """True for changes to one transition (an arrow)."""
        return self.kind in TRANSITION_KINDS


@dataclass(frozen=True)
class MachineDiff:
    """The semantic difference of ``old`` and ``new``.

    ``matched`` maps each old state path that lives on to its new path (renamed and moved
    states included, with the steps a retry adds); ``renamed`` says why a renamed or moved
    state was matched ("hint", "moved", "migration from '1'"); ``migrated_to`` where the new
    definition's migration puts a run that was in a removed state.
    """

    old: Machine = field(compare=False, repr=False)
    new: Machine = field(compare=False, repr=False)
    changes: tuple[Change, ...]
    matched: Mapping[str, str]
    renamed: Mapping[str, str]
    migrated_to: Mapping[str, str]
    changed_states: frozenset[str]  # old paths of states that are there in both, but changed

    @property
    def empty(self) -> bool:
        """True when the two definitions behave the same (no change found)."""
        return not self.changes

    def removed_states(self) -> tuple[str, ...]:
        """Old state paths with no counterpart in the new machine, in document order."""
        return tuple(path for path in _paths(self.old) if path not in self.matched)

    def counts(self) -> dict[str, int]:
        """Number of changes per mark."""
        found = {ADDED: 0, REMOVED: 0, CHANGED: 0}
        for change in self.changes:
            found[change.mark] += 1
        return found


def state_path(node: StateNode) -> str:
    """A state's path below the root ("payment.charging"); "" for the root."""
    return ".".join(node.path)


def _paths(machine: Machine) -> list[str]:
    return [state_path(n) for n in machine.definition.nodes if n.parent is not None]
