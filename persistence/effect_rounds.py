"""A round's effects executed: every run's pending effects in order, the runs of a round at once
on a small thread pool. A limited workflow's run takes its place before it is stepped and gives
it back when its drive ends, unless a call of it is still open (its place is then the run's
until a later drive ends with none: `persistence.capacity`). Limited calls take their places
beside their runs (`persistence.calls`); only a call an older release recorded in its run's
step, left pending across the upgrade, runs in a step, and takes its place there first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from persistence.capacity import LimitKeyError
from persistence.failures import Failures
from persistence.host import Host
from persistence.outbox import Executed, Executor
from persistence.planning import Leased
from persistence.stores import Grant, RunRecord

log = logging.getLogger("statecharts.runs")


class EffectRounds:
    """Executes the effects of the runs a driver of `owner` holds, round by round (see the
    module); `holds` as `RunDriver.holds`."""

    def __init__(
        self,
        host: Host,
        owner: str,
        lease_ms: int,
        parallel: int,
        holds: Callable[[set[str], bool], None] | None,
        failures: Failures,
    ) -> None:
        self.host = host
        self.owner = owner
        self.lease_ms = lease_ms
        self.parallel = parallel
        self.holds = holds
        self.failures = failures
        self.telemetry = host.telemetry
        self.executor = Executor(host.listeners, host.breaker, host.clock.now, host.dry_run)
        self._pool: ThreadPoolExecutor | None = None

    def close(self) -> None:
        """Stop the threads that run a round's effects (if any were started)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def execute_round(self, leased: list[Leased]) -> list[list[Executed] | Exception | Grant]:
        """Every run's pending effects, in order within each run; the runs of a round at once
        (up to `parallel` threads), so one slow call does not hold up its batch-mates."""
        busy = sum(1 for x in leased if x.pending)
        if busy < 2 or self.parallel < 2:
            return [self._execute(x) for x in leased]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.parallel, f"effects-{self.owner}")
        return list(self._pool.map(self._execute, leased))

    def _execute(self, x: Leased) -> list[Executed] | Exception | Grant:
        """`x`'s pending effects in order, up to the first transient failure (the rest wait
        for the retry); an unexpected exception is returned, to fail this run only. A limited
        call left in the step by an older release takes its place first and gives it back
        after (`LoadControl.step_places`); a refusal is returned (the store released the run,
        which waits for its place, woken when a slot is reserved for it)."""
        done: list[Executed] = []
        load = self.host.load
        try:
            places = load.step_places(x.machine, x.run, x.pending) if x.pending else []
            if places:
                grant = load.enter(
                    x.run.id, self.owner, places, self.host.clock.now(), self.lease_ms
                )
                if not grant.granted:
                    return grant
            try:
                for key, kind, payload in x.pending:
                    with self.telemetry.effect(x.run, kind, payload, key) as outcome:
                        done.append(self.executor.execute(x.machine, kind, payload, key))
                        outcome(done[-1].outcome.status, done[-1].outcome.error)
                    if done[-1].transient is not None:
                        break
            finally:
                if places:  # (paused before its slot goes back: nobody starts in between)
                    now = self.host.clock.now()
                    load.pause_after(places, done, now)
                    load.leave(places, now, self.lease_ms)
        except Exception as exc:  # a bug or a hostile payload: this run fails, not the thread
            return exc
        return done

    def waiting(self, run: RunRecord, grant: Grant) -> None:
        """A run released to wait for a limit (the store wrote why on its row)."""
        log.debug(
            "run %s (%s): %s, looks again at %s",
            run.id,
            run.workflow_name,
            grant.reason,
            grant.retry_at,
        )
        self.telemetry.waiting(run, grant.reason or "")
        if self.holds is not None:
            self.holds({run.id}, False)

    def enter_workflow(self, run: RunRecord, now: int) -> bool:
        """Whether a claimed run may be stepped: a limited workflow's run takes a place
        (else it was released to wait)."""
        if run.terminal:
            return True
        try:
            place = self.host.load.workflow_place(run)
        except LimitKeyError as exc:  # never stepped without its place: failed, saying why
            self.failures.fail_unreadable(run, str(exc), now)
            return False
        if place is None:
            return True
        grant = self.host.load.enter(run.id, self.owner, [place], now, self.lease_ms)
        if not grant.granted:
            self.waiting(run, grant)
        return grant.granted

    def leave_workflows(self, runs: Sequence[RunRecord]) -> None:
        """Give back the places of the limited workflows' `runs` whose drive ended, but not of
        those with a call still open: a run counts against its limit while its calls work
        beside it (and its next step, for an event or a timer meanwhile, finds its place held,
        never waiting behind its own call); a later drive that ends with none gives it back."""
        places = {}
        for run in runs:
            try:
                place = self.host.load.workflow_place(run)
            except LimitKeyError:  # (an ended run without its key: it took no place)
                continue
            if place is not None:
                places[run.id] = place
        if places:
            working = self.host.store.open_calls(list(places))
            self.host.load.leave(
                [p for run_id, p in places.items() if not working.get(run_id)],
                self.host.clock.now(),
                self.lease_ms,
            )
