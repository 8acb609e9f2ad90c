"""What an import produces besides the config: the hidden states, the node-by-node mapping and
the named implementations the user must write."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

HIDDEN_KINDS: dict[str, str] = {
    "trigger_wait": "waiting for a trigger",
    "retry": "retry on fail (attempting / waiting to retry)",
    "error_outcome": "error outcome branch (continue on error)",
    "run_done": "run finished",
    "run_start": "the run starts at once",
    "next_branch": "the next waiting branch (n8n's execution stack)",
    "reply_wait": "waiting for a reply (send and wait)",
    "endless_loop": "a run going round a loop without end (the run fails, naming the nodes)",
}


@dataclass(frozen=True)
class HiddenState:
    """A state that stands for something n8n does silently: ``kind`` (a key of
    ``HIDDEN_KINDS``), ``state`` (dotted path from the machine root), the ``node`` it came from
    (None for machine-wide ones) and ``reason``."""

    kind: str
    state: str
    node: str | None
    reason: str


@dataclass(frozen=True)
class NodeMapping:
    """Where a canvas node went: its ``state`` (dotted path) or None, and ``how``."""

    node: str
    type: str
    state: str | None
    how: str


@dataclass(frozen=True)
class Implementation:
    """A named guard, action, actor or delay the config refers to. ``provided`` ones come
    with ``statecharts.io.n8n.runtime`` (n8n's own bookkeeping, such as its execution stack).
    ``signature`` (actors) is ``"<parameter>|<return type>"`` for the skeleton."""

    kind: str
    name: str
    node: str | None
    doc: str
    provided: bool = False
    signature: str | None = None


@dataclass(frozen=True)
class MachineImport:
    """One machine made from a workflow (the primary, or the error machine)."""

    machine_id: str
    config: dict[str, Any]
    hidden_states: tuple[HiddenState, ...]
    nodes: tuple[NodeMapping, ...]
    implementations: tuple[Implementation, ...]
    warnings: tuple[str, ...] = field(default=())
    decisions: tuple[str, ...] = field(default=())

    @property
    def state_count(self) -> int:
        """States in the machine, counting the attempting / waiting-to-retry pair the engine
        makes of each retried invoke."""
        return _count_states(self.config)

    def hidden_counts(self) -> dict[str, int]:
        """Hidden states per kind (kinds with none left out)."""
        counts: dict[str, int] = {}
        for hidden in self.hidden_states:
            counts[hidden.kind] = counts.get(hidden.kind, 0) + 1
        return counts


def _count_states(config: dict[str, Any]) -> int:
    total = 0
    for child in (config.get("states") or {}).values():
        total += 1 + _count_states(child)
        invoke = child.get("invoke")
        if isinstance(invoke, dict) and invoke.get("retry") is not None:
            total += 2
    return total
