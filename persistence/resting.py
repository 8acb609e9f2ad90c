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
from persistence.stores.rules import is_call

CAPACITY = 4096
"""How many runs a process follows (the most recently started, sent to or stepped)."""


class Resting:
    """The runs this process started or sent events to, each with its last committed row when
    that left it at rest (bounded, thread-safe). Steps its workers commit keep a followed run's
    row current; a run no one here started or sent to is never followed, so a process that
    only works holds no rows."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._runs: OrderedDict[str, RunRecord | None] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, run_id: str) -> RunRecord | None:
        """The run's row as this process last left it at rest, if it did and still knows."""
        with self._lock:
            return self._runs.get(run_id)

    def started(self, run: RunRecord, effects: bool, now: int) -> None:
        """`run` was just inserted (with `effects` pending): followed, its row kept if it is at
        rest."""
        at_rest = (
            run.status == ACTIVE
            and run.lease_owner is None
            and not effects
            and not _due(run.wake_at, now)
        )
        self._follow(run.id, run if at_rest else None)

    def committed(
        self, run: RunRecord, commit: StepCommit, version: int, now: int, *, sent: bool
    ) -> None:
        """`commit`, a step of `run` (`sent`: a send's), was written at `version`. A run this
        process follows, or a sent one, is followed with its new row if the step left it at
        rest (released, active, no new effects but calls, which run beside it, nothing due),
        else without a row; an ended run is dropped."""
        if commit.status != ACTIVE:
            self.drop(run.id)
            return
        with self._lock:
            if not sent and run.id not in self._runs:
                return
        if (
            not commit.release
            or any(not is_call(e) for e in commit.new_effects)
            or commit.start_runs
            or _due(commit.wake_at, now)
        ):
            self._follow(run.id, None)
            return
        self._follow(
            run.id,
            replace(
                run,
                state=commit.state,
                snapshot=commit.snapshot,
                status=commit.status,
                attempt_count=run.attempt_count
                if commit.attempt_count is None
                else commit.attempt_count,
                last_error=commit.last_error if commit.last_error is not None else run.last_error,
                workflow_version=commit.workflow_version or run.workflow_version,
                updated_at=now,
                wake_at=commit.wake_at,
                lease_owner=None,
                lease_expires_at=None,
                version=version,
                previous_owner=None,
                due_at=None,
            ),
        )

    def moved(self, run_id: str) -> None:
        """`run_id` (sent an event here) is no longer known to be at rest: followed without a
        row (its event was queued for a worker, or the send failed)."""
        self._follow(run_id, None)

    def drop(self, run_id: str) -> None:
        """Stop following `run_id` (it ended, or was cancelled here)."""
        with self._lock:
            self._runs.pop(run_id, None)

    def _follow(self, run_id: str, row: RunRecord | None) -> None:
        with self._lock:
            known = self._runs.get(run_id)
            if row is not None and known is not None and known.version > row.version:
                return  # a later step of it was kept first (another thread's)
            self._runs[run_id] = row
            self._runs.move_to_end(run_id)
            while len(self._runs) > self._capacity:
                self._runs.popitem(last=False)


def _due(wake_at: int | None, now: int) -> bool:
    return wake_at is not None and wake_at <= now
