"""`Inline`: start a run and step it in the calling thread, as DBOS runs a workflow in its caller.

`Inline(runtime).run("invoice", input)` starts the run already leased to the calling thread (the
lease is taken in the insert's own transaction, so there is no claim) and steps it right there,
back to back while it holds the lease, exactly as a worker steps a claimed run
(`persistence.driver`): each step's effects execute after the commit that recorded them, and
each step commits its snapshot with their outcomes in one transaction, under the lease and the
version it read. Its invoked calls run beside the run as a worker's do (`persistence.calls`),
leased to this caller in the commit that records them and run here; each call's end is
recorded with the step that applies its result, in one transaction. It returns when the run
waits for something outside (a sent event, a timer not yet due) or ends; a worker takes it from
there. A 3-call workflow costs four transactions (the insert, then one per call) and no poll.

Every guarantee of a worker's run holds (docs/persistence.md): if the caller dies, its lease
runs out and any worker takes the run over with the same idempotency keys; a caller that lost
its lease meanwhile (a call longer than `lease_ms`: the lease is renewed by each step's commit,
there is no heartbeat) writes nothing, and `run` reports the row as the new holder left it.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from dataclasses import dataclass
from typing import Any

from persistence.calls import CallExecutor
from persistence.runtime import KeyReuse, Runtime
from persistence.stores import RunRecord
from persistence.stores.rules import is_call, leasable_calls
from statecharts import Snapshot


@dataclass(frozen=True, slots=True)
class InlineResult:
    """Where `Inline.run` left a run: its id, whether this call created it, its status
    (`active` while it waits for an event or a timer; else terminal) and snapshot."""

    run_id: str
    created: bool
    status: str
    snapshot: Snapshot

    @property
    def output(self) -> Any:
        """The run's output (None unless it is done)."""
        return self.snapshot.output


class Inline:
    """Runs started and stepped in the calling thread (see the module docstring).

    Thread-safe: each calling thread leases under an owner id of its own
    (`<host>:<pid>:<id>/inline-<thread>`). `lease_ms`: how long a step may take before a worker
    may take the run over (renewed by every commit). `max_steps`: after this many steps in one
    call the run is released to the workers.
    """

    def __init__(self, runtime: Runtime, *, lease_ms: int = 30_000, max_steps: int = 1000) -> None:
        if lease_ms < 100:
            raise ValueError(f"lease_ms must be at least 100, got {lease_ms}")
        self.runtime = runtime
        self.lease_ms = lease_ms
        self.max_steps = max_steps
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._local = threading.local()

    def run(
        self,
        name: str,
        input: Any = None,
        key: str | None = None,
        *,
        reuse: KeyReuse = "use_existing",
        traceparent: str | None = None,
    ) -> InlineResult:
        """Start a run of `name` (as `Runtime.start`, keys and reuse included) and step it here
        until it waits or ends. An existing run returned for `key` is not stepped here (a
        worker, or the caller that started it, does that): its row is reported as it is."""
        calls = self._calls()
        driver = calls.driver
        driver.last_step, driver.unleased_calls = None, set()
        record, created, effects, snapshot = self.runtime.begin_run(
            name,
            input,
            key,
            reuse=reuse,
            traceparent=traceparent,
            lease=(driver.owner, self.lease_ms),
            calls=calls,
        )
        if record.lease_owner == driver.owner:
            drove = driver.drive(driver.planner.started(record, effects, snapshot), lambda: False)
            if drove.released is None:
                return self._as_stored(self.runtime.get(record.id), created)  # (failed, lost)
        if created and not leasable_calls(effects) and any(is_call(e) for e in effects):
            # (its calls wait for its first step's actions: not leased with the insert)
            driver.unleased_calls.add(record.id)
        ran = calls.run_until_idle(claim=False)  # its calls, each end recorded with its step
        while record.id in driver.unleased_calls:  # calls that waited for its actions
            driver.unleased_calls.discard(record.id)
            ran += calls.run_until_idle(run_id=record.id)
        last = driver.last_step
        if last is not None and last[0] == record.id:
            return InlineResult(record.id, created, last[1], last[2])
        if snapshot is not None and not ran:  # created, waiting: as inserted
            return InlineResult(record.id, created, record.status, snapshot)
        return self._as_stored(self.runtime.get(record.id) if ran else record, created)

    def _calls(self) -> CallExecutor:
        """This thread's call executor (it runs the calls here), with its driver."""
        calls: CallExecutor | None = getattr(self._local, "calls", None)
        if calls is None:
            owner = f"{self.id}/inline-{threading.get_ident()}"
            calls = CallExecutor(
                self.runtime, owner, lease_ms=self.lease_ms, max_steps=self.max_steps
            )
            self._local.calls = calls
        return calls

    def _as_stored(self, record: RunRecord, created: bool) -> InlineResult:
        return InlineResult(record.id, created, record.status, self.runtime.restore(record))
