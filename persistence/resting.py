"""Runs this process left at rest, as it committed them: what a send steps from unread.

A run is *at rest* when it is active, nobody holds it and nothing is due: no effect waits to
run, no timer is due, only an outside event can move it. A process that started such a run or
committed such a step of it knows the run's row at that version exactly (it wrote it), so the
step of the next event sent to it can be computed before the row is read and written by one
statement that checks the run is still that (`RunStore.send_and_step`'s `rest`): one round
trip instead of two. The record here is only a guess about the database; the store's check
decides, and a stale one costs one more round trip, never a wrong write. With the row, the
snapshot it restores to is kept as the step left it in memory (`restored`), as a driver keeps
a leased run's between its steps: the next step need not restore it from the row again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from msgspec.structs import replace

from persistence.stores import ACTIVE, RunRecord, StepCommit
from persistence.stores.rules import is_call
from statecharts import Snapshot

CAPACITY = 4096
"""How many runs a process follows (the most recently started, sent to or stepped)."""


class Resting:
    """The runs this process started or sent events to, each with its last committed row when
    that left it at rest (bounded, thread-safe). Steps its workers commit keep a followed run's
    row current; a run no one here started or sent to is never followed, so a process that
    only works holds no rows."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._runs: OrderedDict[str, tuple[RunRecord, Snapshot | None] | None] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, run_id: str) -> RunRecord | None:
        """The run's row as this process last left it at rest, if it did and still knows."""
        with self._lock:
            kept = self._runs.get(run_id)
        return None if kept is None else kept[0]

    def restored(self, run: RunRecord) -> Snapshot | None:
        """The snapshot `run` restores to, when `run` is the very row `get` gives (the step
        that left it at rest kept it); else None (restore it from the row)."""
        with self._lock:
            kept = self._runs.get(run.id)
        return kept[1] if kept is not None and kept[0] is run else None

    def started(
        self, run: RunRecord, effects: bool, now: int, snapshot: Snapshot | None = None
    ) -> None:
        """`run` was just inserted (with `effects` pending): followed, its row kept if it is at
        rest (with `snapshot`, what it restores to, if given)."""
        at_rest = (
            run.status == ACTIVE
            and run.lease_owner is None
            and not effects
            and not _due(run.wake_at, now)
        )
        self._follow(run.id, (run, snapshot) if at_rest else None)

    def committed(
        self,
        run: RunRecord,
        commit: StepCommit,
        version: int,
        now: int,
        *,
        sent: bool,
        snapshot: Snapshot | None = None,
    ) -> None:
        """`commit`, a step of `run` (`sent`: a send's), was written at `version`. A run this
        process follows, or a sent one, is followed with its new row if the step left it at
        rest (released, active, no new effects but calls, which run beside it, nothing due),
        else without a row; an ended run is dropped. `snapshot`: what the new row restores
        to (the step's own), kept with it."""
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
        row = replace(
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
        )
        self._follow(run.id, (row, snapshot))

    def moved(self, run_id: str) -> None:
        """`run_id` (sent an event here) is no longer known to be at rest: followed without a
        row (its event was queued for a worker, or the send failed)."""
        self._follow(run_id, None)

    def drop(self, run_id: str) -> None:
        """Stop following `run_id` (it ended, or was cancelled here)."""
        with self._lock:
            self._runs.pop(run_id, None)

    def _follow(self, run_id: str, row: tuple[RunRecord, Snapshot | None] | None) -> None:
        with self._lock:
            known = self._runs.get(run_id)
            if row is not None and known is not None and known[0].version > row[0].version:
                return  # a later step of it was kept first (another thread's)
            self._runs[run_id] = row
            self._runs.move_to_end(run_id)
            while len(self._runs) > self._capacity:
                self._runs.popitem(last=False)


def _due(wake_at: int | None, now: int) -> bool:
    return wake_at is not None and wake_at <= now
