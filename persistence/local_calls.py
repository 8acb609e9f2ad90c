"""`LocalExecutors`: the call executors serving in this process, as one `CallTaker`.

A `Worker` attaches its call executor to its runtime while it serves (`Runtime.attach_executor`).
The steps and starts this runtime commits outside that worker's own drivers (`Runtime.start`,
`start_many`, the slots of the worker's schedules, `send`) then lease the calls they record to
it in their own commit and hand them over once committed, as a worker's steps hand theirs to
its executor: no claim, no wake-up, no poll between a start and its call. With none attached,
or the newest full, they lease nothing: their calls stay due for any executor's claim, as they
would in a process without a worker.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Protocol

from persistence.planning import CallTaker
from persistence.stores import CallRecord, RunRecord
from statecharts import Machine


class OwnedCallTaker(CallTaker, Protocol):
    """A call executor: a `CallTaker` whose leases are under its `owner`."""

    owner: str


class LocalExecutors:
    """The executors attached in this process (`attach`), newest last: leases come from the
    newest; calls leased to one are handed to that one, attached still or not (it detaches
    before it stops)."""

    def __init__(self) -> None:
        self._attached: tuple[OwnedCallTaker, ...] = ()
        self._by_owner: weakref.WeakValueDictionary[str, OwnedCallTaker] = (
            weakref.WeakValueDictionary()
        )
        self._lock = threading.Lock()

    def attach(self, executor: OwnedCallTaker) -> None:
        """Lease the calls recorded here to `executor` from now on."""
        with self._lock:
            self._attached = (*self._attached, executor)
            self._by_owner[executor.owner] = executor

    def detach(self, executor: OwnedCallTaker) -> None:
        """Lease it no more calls (those leased already are still handed to it)."""
        with self._lock:
            self._attached = tuple(e for e in self._attached if e is not executor)

    def lease(self, count: int) -> tuple[str, int] | None:
        """The newest attached executor's lease for `count` more calls; None when none is
        attached or it has no room."""
        attached = self._attached
        return attached[-1].lease(count) if attached else None

    def adopt(self, calls: Sequence[CallRecord], run: RunRecord, machine: Machine) -> None:
        """Hand `calls` to the executor they were leased to."""
        owner = calls[0].owner if calls else None
        executor = self._by_owner.get(owner) if owner is not None else None
        if executor is not None:  # (gone: its leases lapse, and a claim takes the calls)
            executor.adopt(calls, run, machine)


class BatchLease:
    """A `CallTaker` for the runs of one batch of starts (`Runtime.start_many`), all leased
    before any is handed over: each lease counts the calls leased before it in the batch, which
    the executor holds only once they are handed over."""

    def __init__(self, taker: CallTaker) -> None:
        self.taker = taker
        self.leased = 0

    def lease(self, count: int) -> tuple[str, int] | None:
        """A lease for `count` more calls after those leased so far, or None."""
        lease = self.taker.lease(self.leased + count)
        if lease is not None:
            self.leased += count
        return lease

    def adopt(self, calls: Sequence[CallRecord], run: RunRecord, machine: Machine) -> None:
        """Hand the calls over."""
        self.taker.adopt(calls, run, machine)
