"""Running the example workflows durably: the same ``run(name, input, key) -> Outcome`` as
``machines.local.LocalRunner``, on ``persistence.Runtime`` and a ``Worker`` over a store URL.

Time: the runtime's clock is a ``SimulatedClock`` that starts at the wall clock and jumps to a
run's next timer when the run waits (a retry's backoff), so three simulated weeks take seconds.
It never falls behind the wall clock, because leases written by worker subprocesses (which use
the wall clock) must expire on it. Error workflows are the runtime's: started in the failing
step's transaction (key ``error-of:<run id>``); ``finish`` drives that run too.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from machines.runs import Outcome, retry_waits_entered
from statecharts import Machine, SimulatedClock, Snapshot


def wall_ms() -> int:
    """The wall clock in epoch milliseconds."""
    return time.time_ns() // 1_000_000


class DurableRunner:
    """Runs ``machines`` on the store at ``url`` (migrated on open) with one in-process worker.

    ``lease_ms`` is the lease the in-process worker takes, and how long a killed worker
    subprocess's runs stay claimed (pass the same to ``statecharts worker --lease-ms``).
    ``dry_run``: the runtime's dry-run (invokes marked ``external`` are not executed).
    ``start``: the simulated clock's first instant; given, the clock no longer keeps up with
    the wall clock (only the in-process worker may then run the runs), so tests can replay
    the days of a scenario on the durable runtime.
    """

    def __init__(
        self,
        url: str,
        machines: Sequence[Machine],
        lease_ms: int = 1000,
        dry_run: bool = False,
        start: int | None = None,
    ) -> None:
        from persistence import open_store
        from persistence.runtime import Runtime
        from persistence.worker import Worker

        self.url = url
        self.follows_wall_clock = start is None
        self.clock = SimulatedClock(wall_ms() if start is None else start)
        self.store = open_store(url, migrate=True)
        self.runtime = Runtime(self.store, list(machines), clock=self.clock, dry_run=dry_run)
        # runs handed to worker subprocesses (wall clock) are started on the wall clock, else
        # they would not be due for them until the wall clock caught up with ours
        self.wall_runtime = Runtime(self.store, list(machines), dry_run=dry_run)
        self.worker = Worker(self.runtime, lease_ms=lease_ms)
        self.lease_ms = lease_ms
        self.outcomes: list[Outcome] = []
        self.run_ids: dict[str, str] = {}

    def start(
        self, name: str, input: Mapping[str, Any], key: str, for_other_workers: bool = False
    ) -> str:
        """Start a run (idempotent by ``key`` while it is active); its id.
        ``for_other_workers``: due now on the wall clock, for worker processes."""
        runtime = self.wall_runtime if for_other_workers else self.runtime
        run_id = runtime.start(name, dict(input), key=key)
        self.run_ids[key] = run_id
        return run_id

    def run(self, name: str, input: Mapping[str, Any], key: str) -> Outcome:
        """Start ``name`` and drive it to its end."""
        return self.finish(name, key, self.start(name, input, key), input)

    def finish(self, name: str, key: str, run_id: str, input: Mapping[str, Any]) -> Outcome:
        """Drive the run to its end (jumping the clock to its timers), then start the error
        workflow if it failed."""
        self._catch_up()
        while True:
            self.worker.run_until_idle()
            record = self.runtime.get(run_id)
            if record.terminal:
                break
            due = self._next_due(record)
            if due is None or (
                record.lease_owner is not None
                and record.lease_expires_at is not None
                and record.lease_expires_at > self.clock.now()
            ):
                # leased by another (perhaps dead) worker: wait out its lease
                due = max(due or 0, (record.lease_expires_at or self.clock.now()) + 1)
            self.clock.set(max(self.clock.now(), due))
            self._catch_up()
        snapshot = self._final_snapshot(run_id, record.status, record.last_error)
        outcome = Outcome(name, key, snapshot, self.retries(run_id))
        self.outcomes.append(outcome)
        if snapshot.status == "error":
            outcome.alert = self._error_run(name, run_id, input)
        return outcome

    def _next_due(self, record: Any) -> int | None:
        """When the run next needs a worker: its own wake-up, or its calls' (one waiting out a
        transient failure's backoff, or held by a worker that died until its lease runs out)."""
        times = [record.wake_at] if record.wake_at is not None else []
        for call in self.store.list_calls(record.id):
            if call.status == "pending":
                times.append(call.available_at)
            elif call.status == "running" and call.lease_expires_at is not None:
                times.append(call.lease_expires_at)
        return min(times, default=None)

    def _catch_up(self) -> None:
        if self.follows_wall_clock:
            self.clock.set(max(self.clock.now(), wall_ms()))

    def resume(self, name: str, key: str, input: Mapping[str, Any]) -> Outcome:
        """Drive run ``key`` to its end with a fresh worker, as a new process would after the
        worker driving it died (its lease runs out first)."""
        from persistence.worker import Worker

        self.worker = Worker(self.runtime, lease_ms=self.lease_ms)
        return self.finish(name, key, self.run_ids[key], input)

    def _error_run(self, name: str, run_id: str, input: Mapping[str, Any]) -> Outcome | None:
        """The error workflow run the runtime started for failed run ``run_id`` (key
        ``error-of:<run id>``), driven to its end."""
        handler = self.runtime.error_workflows.get(name)
        if handler is None or name in self.runtime.error_workflows.values():
            return None
        key = f"error-of:{run_id}"
        found = next(
            (r for r in self.store.list_runs(workflow_name=handler, limit=50) if r.key == key), None
        )
        if found is None:
            raise LookupError(f"run {run_id} of {name} failed but no {handler} run has key {key!r}")
        return self.finish(handler, key, found.id, input)

    def _final_snapshot(self, run_id: str, status: str, last_error: str | None) -> Snapshot:
        snapshot = self.runtime.snapshot(run_id)
        if status == "error" and snapshot.status != "error":
            # the run failed outside the machine (an action raised): say so in the snapshot
            machine = snapshot.machine
            assert isinstance(machine, Machine)
            snapshot, _ = machine.fail(snapshot, {"name": "RunFailed", "message": last_error or ""})
        return snapshot

    def retries(self, run_id: str) -> int:
        """Retry waits the run entered, from its journal."""
        return sum(
            retry_waits_entered(e.state_before.split(","), e.state_after.split(","))
            for e in self.store.list_events(run_id)
        )

    def close(self) -> None:
        """Close the store."""
        self.store.close()


def serve(url: str, lease_ms: int, poll_ms: int = 50, tz: str | None = None) -> None:
    """Be a worker process for the example workflows (``machines.followup`` and
    ``machines.invoice``, wired from the environment) until SIGTERM; with ``tz``, also fire
    the follow-up schedules in that time zone."""
    from machines import followup, invoice
    from machines.followup.schedules import schedules
    from persistence import open_store
    from persistence.runtime import Runtime
    from persistence.worker import Worker

    machines = [*followup.MACHINES.values(), *invoice.MACHINES.values()]
    runtime = Runtime(open_store(url), machines)
    Worker(
        runtime, lease_ms=lease_ms, poll_ms=poll_ms, schedules=schedules(runtime, tz) if tz else ()
    ).run()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m machines.durable --store URL [--lease-ms N] [--schedules TZ]``: a worker
    process."""
    parser = argparse.ArgumentParser(prog="python -m machines.durable", description=serve.__doc__)
    parser.add_argument("--store", required=True)
    parser.add_argument("--lease-ms", type=int, default=30_000)
    parser.add_argument(
        "--schedules",
        metavar="TZ",
        default=None,
        help="also fire the follow-up schedules, in time zone TZ",
    )
    args = parser.parse_args(argv)
    serve(args.store, args.lease_ms, tz=args.schedules)
    return 0


if __name__ == "__main__":
    sys.exit(main())
