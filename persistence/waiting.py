"""Waiting for answers: the step that applied a sent event (`Runtime.send(..., wait=5.0)`,
`statecharts runs send --wait 5s`) and the end of a run (`Runtime.wait`, `runs wait`).

A waiter reads the store, and between two reads waits for the run to move:

- PostgreSQL: the waiter is counted in the run's row (`Store.watch`: `waiters`,
  `waited_until`); every statement that writes a step of a run so marked sends a NOTIFY
  naming it (read from the row it wrote, so a waiter counted before the step's write is never
  missed), which the store's listener turns into `Wakeup.progressed`: the waiter reads again
  once per step of its run and never on a timer. A listener that reconnected wakes every
  waiter (it may have missed one).
- SQLite (one file, no server to notify through): the waiter reads again after 10 ms,
  doubling up to 250 ms (`BACKOFF_FIRST_S`, `BACKOFF_MAX_S`), until the deadline.

Every wait is bounded by its timeout; nothing here loops without one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from persistence.stores import ACTIVE, EventProgress, RunRecord, Store

BACKOFF_FIRST_S = 0.01
BACKOFF_MAX_S = 0.25
MAX_WAIT_S = 3600.0
"""The longest wait accepted."""
WATCH_MARGIN_S = 60.0
"""How much longer than its wait a waiter is counted on PostgreSQL (`Store.watch`): a killed
waiter's count runs out then."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Answer:
    """What a send that waits returns: how its event `inbox_id` stands and the run.

    `status` is `applied` (by step `step`, leaving the run's active leaves in `state`, exactly
    as right after the event; `run` is the row read once that step had committed: its
    snapshot is the one that step left when `run.version == step`, else later steps came
    on top), `queued` (the wait elapsed first: a worker applies it later; `run` as it was
    then) or `dead` (the run ended before applying it: `reason`). `step` and `state` are None
    for an event applied by a runtime that journals nothing (`Runtime(journal=False)`)."""

    run_id: str
    inbox_id: int
    status: str
    run: RunRecord
    step: int | None = None
    state: str | None = None
    reason: str | None = None

    @property
    def exact(self) -> bool:
        """Whether `run.snapshot` is the snapshot the event's step left (no later step)."""
        return self.step is not None and self.run.version == self.step


@dataclass(frozen=True, slots=True)
class Ended:
    """A run that has ended (`Runtime.wait`): its status (`done`, `done_partial`, `error`,
    `cancelled`), the machine's output (done) and error (the machine's error, or the reason
    the run was failed or cancelled, as `{"name", "message"}`)."""

    run: RunRecord
    status: str
    output: Any = None
    error: Any = None


class StillRunningError(TimeoutError):
    """`Runtime.wait` timed out before the run ended; `run` is its row then."""

    def __init__(self, run: RunRecord, timeout: float) -> None:
        self.run = run
        super().__init__(
            f"run {run.id} is still {run.status} in state {run.state} after {timeout:g}s"
        )


def check_timeout(timeout: float) -> float:
    """`timeout` (seconds) if a wait may take it, else `ValueError` saying why."""
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout != timeout:
        raise ValueError(f"timeout must be a number of seconds, got {timeout!r}")
    if timeout < 0 or timeout > MAX_WAIT_S:
        raise ValueError(f"timeout must be between 0 and {MAX_WAIT_S:g} seconds, got {timeout:g}")
    return float(timeout)


class _Watch:
    """One waiter of one run, between `with` and its end (see the module docstring)."""

    def __init__(self, store: Store, run_id: str, timeout: float) -> None:
        self.store, self.run_id, self.timeout = store, run_id, timeout
        self.deadline = time.monotonic() + timeout
        self.backoff = BACKOFF_FIRST_S
        self.notified = False

    def __enter__(self) -> _Watch:
        # the id as the store spells it (a step's NOTIFY names it so); RunNotFoundError if none
        self.run_id = self.store.get_run(self.run_id).id
        self.wakeup = self.store.wakeup()
        self.wakeup.follow(self.run_id)
        try:
            self.notified = self.store.watch(self.run_id, self.timeout + WATCH_MARGIN_S)
        except BaseException:
            self.wakeup.unfollow(self.run_id)
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self.notified:
                self.store.unwatch(self.run_id)
        finally:
            self.wakeup.unfollow(self.run_id)

    def until(self, read: Callable[[], T], done: Callable[[T], bool]) -> T:
        """`read()` again each time the run moves until `done` holds of what it returned or
        the deadline passes; the last thing read."""
        while True:
            mark = self.wakeup.progress_mark(self.run_id)  # (before the read: none is missed)
            found = read()
            left = self.deadline - time.monotonic()
            if done(found) or left <= 0:
                return found
            if self.notified:
                self.wakeup.wait_progress(self.run_id, mark, left)
            else:
                time.sleep(min(self.backoff, left))
                self.backoff = min(self.backoff * 2, BACKOFF_MAX_S)


def _waited(
    store: Store, run_id: str, timeout: float, read: Callable[[str], T], done: Callable[[T], bool]
) -> T:
    """`read(run_id)` until `done` holds of it or `timeout` seconds pass: read once first,
    and only if that is not the answer, watch the run (`_Watch`) and read as it moves."""
    check_timeout(timeout)
    found = read(run_id)
    if done(found) or timeout == 0:
        return found
    with _Watch(store, run_id, timeout) as watch:
        return watch.until(lambda: read(watch.run_id), done)


def wait_applied(store: Store, run_id: str, inbox_id: int, timeout: float) -> Answer:
    """Wait up to `timeout` seconds for the event queued as inbox row `inbox_id` of `run_id`
    to be applied (or dead-lettered); the `Answer` (`queued` if the time ran out)."""
    progress: EventProgress = _waited(
        store,
        run_id,
        timeout,
        lambda rid: store.event_progress(rid, inbox_id),
        lambda p: p.status != "queued",
    )
    run = store.get_run(run_id)
    return Answer(
        run.id, inbox_id, progress.status, run, progress.step, progress.state, progress.reason
    )


def wait_ended(store: Store, run_id: str, timeout: float) -> Ended:
    """Wait up to `timeout` seconds for run `run_id` to end: its `Ended`, or
    `StillRunningError` with the run as it is when the time ran out."""
    run = _waited(store, run_id, timeout, store.get_run, lambda r: r.status != ACTIVE)
    if run.status == ACTIVE:
        raise StillRunningError(run, timeout)
    return ended(run)


def ended(run: RunRecord) -> Ended:
    """An ended run's `Ended`: output and error from its snapshot, else (a run failed by its
    worker or cancelled) the error from its row."""
    output, error = run.snapshot.get("output"), run.snapshot.get("error")
    if error is None and run.status in ("error", "cancelled"):
        name = "RunFailed" if run.status == "error" else "RunCancelled"
        error = {"name": name, "message": run.last_error or run.status}
    return Ended(run, run.status, output, error)
