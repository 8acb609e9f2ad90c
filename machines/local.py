"""Running the example workflows in memory: each run on an actor, to its end, on a clock.

``LocalRunner`` is the in-process stand-in for the durable runtime (``persistence``): it starts
a run, lets simulated time pass through its retry waits, and starts the error workflow when a
run fails, exactly once, never for the error workflow itself. It keeps each unfinished run's
last persisted snapshot, the way a store would, so a run whose process "died" can be resumed.
Tests and the demo's in-memory mode use it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from machines.runs import Outcome, error_workflow_input, error_workflow_of, retry_waits_entered
from statecharts import Actor, Machine, SimulatedClock, Snapshot, wait_for

Observer = Callable[[str, str, Snapshot], None]


@dataclass
class LocalRunner:
    """Runs ``machines`` one at a time on ``clock``. When a run fails, the error workflow its
    machine names (``meta.error_workflow``) is started, once, never for an error workflow
    itself. ``observer(name, key, snapshot)`` sees every snapshot (for timelines)."""

    machines: Mapping[str, Machine]
    clock: SimulatedClock
    observer: Observer | None = None
    outcomes: list[Outcome] = field(default_factory=list)
    persisted: dict[str, dict[str, Any]] = field(default_factory=dict)

    def run(self, name: str, input: Mapping[str, Any], key: str) -> Outcome:
        """Run ``name`` with ``input`` to its end (``key`` identifies the run in logs)."""
        # the actor's id is the run key: invoked calls derive their idempotency keys from it
        actor = Actor(self.machines[name], input=dict(input), clock=self.clock, id=key)
        return self._drive(actor, name, key, input)

    def resume(self, name: str, key: str, input: Mapping[str, Any]) -> Outcome:
        """Resume run ``key`` from the last snapshot it persisted, as a new process would
        after the one driving it died; a call that was in flight is made again."""
        snapshot = self.persisted[key]
        actor = Actor(self.machines[name], snapshot=snapshot, clock=self.clock, id=key)
        return self._drive(actor, name, key, input)

    def _drive(self, actor: Actor, name: str, key: str, input: Mapping[str, Any]) -> Outcome:
        retries = 0
        leaves: tuple[str, ...] = ()

        def watch(snapshot: Snapshot) -> None:
            nonlocal retries, leaves
            retries += retry_waits_entered(leaves, snapshot.active_leaves())
            leaves = snapshot.active_leaves()
            self.persisted[key] = actor.get_persisted_snapshot()
            if self.observer is not None:
                self.observer(name, key, snapshot)

        actor.subscribe(watch)
        actor.start()
        final = wait_for(actor, lambda s: s.status != "active")
        outcome = Outcome(name, key, final, retries)
        self.outcomes.append(outcome)
        self.persisted.pop(key, None)
        if final.status == "error":
            outcome.alert = self._start_error_workflow(name, key, final, input)
        return outcome

    def _start_error_workflow(
        self, name: str, key: str, failed: Snapshot, input: Mapping[str, Any]
    ) -> Outcome | None:
        handler = error_workflow_of(self.machines[name])
        handlers = {error_workflow_of(m) for m in self.machines.values()}
        if handler is None or name in handlers:
            return None
        return self.run(
            handler,
            error_workflow_input(
                name, key, failed, self.clock.now(), bool(input.get("dry_run", False))
            ),
            key=f"{handler}:{key}",
        )
