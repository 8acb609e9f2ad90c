"""How a workflow run ended, as the demo and tests read it, whichever runtime ran it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from persistence.runtime import ErrorWorkflowInput
from persistence.runtime import error_workflow_input as contract
from statecharts import Machine, Snapshot
from statecharts.frozen import thaw
from statecharts.retrying import waits_to_retry


def retry_waits_entered(before: Iterable[str], after: Iterable[str]) -> int:
    """How many retry waits (``waiting_to_retry`` states) a step entered, from the active leaf
    paths before and after it (each one is a retry about to happen)."""
    return len(waits_to_retry(after) - waits_to_retry(before))


@dataclass
class Outcome:
    """How one run ended, with the error workflow's run if it failed."""

    name: str
    key: str
    snapshot: Snapshot
    retries: int
    alert: Outcome | None = None

    @property
    def status(self) -> str:
        """``done``, ``partial`` (done with skipped items) or ``error``."""
        if self.snapshot.status == "done" and self.skipped:
            return "partial"
        return self.snapshot.status

    @property
    def context(self) -> dict[str, Any]:
        """The final context as plain JSON types."""
        value = thaw(self.snapshot.context)
        assert isinstance(value, dict)
        return value

    @property
    def skipped(self) -> list[Any]:
        """Items skipped after their retries ran out (the engine's record)."""
        return [thaw(item) for item in self.snapshot.skipped]


def error_workflow_of(machine: Machine) -> str | None:
    """The error workflow a machine names (``"meta": {"error_workflow": ...}`` at its root)."""
    meta = machine.root.meta
    target = meta.get("error_workflow") if isinstance(meta, Mapping) else None
    return str(target) if target else None


def error_workflow_input(
    name: str, key: str, failed: Snapshot, now: int, dry_run: bool
) -> ErrorWorkflowInput:
    """The input an error workflow gets about a failed in-memory run of ``name``: the durable
    runtime's contract (``persistence.runtime.ErrorWorkflowInput``), the run's key standing in
    for its id (in memory a run has no other)."""
    return contract(key, name, key, ",".join(failed.active_leaves()), failed.error, now, dry_run)
