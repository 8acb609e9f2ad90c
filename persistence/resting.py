"""Runs this process left at rest, as it committed them: what a send steps from unread.

A run is *at rest* when it is active, nobody holds it and nothing is due: no effect waits to
run, no timer is due, only an outside event can move it. A process that started such a run or
committed such a step of it knows the run's row at that version exactly (it wrote it), so the
step of the next event sent to it can be computed before the row is read and written by one
statement that checks the run is still that (`RunStore.send_and_step`'s `rest`): one round
trip instead of two. The record here is only a guess about the database; the store's check
decides, and a stale one costs one more round trip, never a wrong write.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import replace

from persistence.stores import ACTIVE, RunRecord, StepCommit

CAPACITY = 4096
"""How many runs at rest a process remembers (the most recently written ones)."""


class Resting:
    """The last committed row of each run this process left at rest (bounded, thread-safe)."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._runs: OrderedDict[str, RunRecord] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, run_id: str) -> RunRecord | None:
        """The run as this process last left it at rest, if it did (and remembers it)."""
        with self._lock:
            return self._runs.get(run_id)

    def started(self, run: RunRecord, effects: bool, now: int) -> None:
        """`run` was just inserted (with `effects` pending): remembered if it is at rest."""
        if (run.status == ACTIVE and run.lease_owner is None and not effects
                and not _due(run.wake_at, now)):  # fmt: skip
            self._put(run)
        else:
            self.forget(run.id)

    def committed(self, run: RunRecord, commit: StepCommit, version: int, now: int) -> None:
        """`commit`, a step of `run`, was written at `version`: remembered if it left the run
        at rest (released, active, no new effects, nothing due), else forgotten."""
        if (not commit.release or commit.status != ACTIVE or commit.new_effects
                or commit.start_runs or _due(commit.wake_at, now)):  # fmt: skip
            self.forget(run.id)
            return
        self._put(replace(
            run, state=commit.state, snapshot=commit.snapshot, status=commit.status,
            attempt_count=run.attempt_count if commit.attempt_count is None
            else commit.attempt_count,
            last_error=commit.last_error if commit.last_error is not None else run.last_error,
            workflow_version=commit.workflow_version or run.workflow_version, updated_at=now,
            wake_at=commit.wake_at, lease_owner=None, lease_expires_at=None, version=version,
            previous_owner=None, due_at=None))  # fmt: skip

    def forget(self, run_id: str) -> None:
        """`run_id` is no longer known to be at rest (its event was queued, it was cancelled)."""
        with self._lock:
            self._runs.pop(run_id, None)

    def _put(self, run: RunRecord) -> None:
        with self._lock:
            known = self._runs.get(run.id)
            if known is not None and known.version > run.version:
                return  # a later step of it was remembered first (another thread's)
            self._runs[run.id] = run
            self._runs.move_to_end(run.id)
            while len(self._runs) > self._capacity:
                self._runs.popitem(last=False)


def _due(wake_at: int | None, now: int) -> bool:
    return wake_at is not None and wake_at <= now
