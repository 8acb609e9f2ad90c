"""A round's effects executed: every run's pending effects in order, the runs of a round at once
on a small thread pool, each limited call first taking its place in its limit
(`persistence.capacity`) and giving it back after, whatever happens; a slot freed this way is
handed to the next run waiting for it, leased to this driver (stepped from its next round)
while it takes hand-overs (`HANDOVER_S` per drive), else reserved for another worker and woken.
A limited workflow's run takes its place before it is stepped and gives it back when its drive
ends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from persistence.capacity import LimitKeyError
from persistence.failures import Failures
from persistence.host import Host
from persistence.outbox import Executed, Executor
from persistence.planning import Leased
from persistence.stores import Grant, Handover, RunRecord

log = logging.getLogger("statecharts.runs")

HANDOVER_S = 1.0
"""How long a worker's drive takes the runs its freed slots are handed to (leased to it by the
release, stepped at once) before it lets its next freed slot be reserved and woken instead and
goes back to claiming: a long queue does not keep a thread from the other due runs."""


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
        self._handed: list[tuple[str, Handover]] = []  # handed over this round, not yet taken
        self._handed_lock = threading.Lock()
        self._handover_until = 0.0
        self._should_stop: Callable[[], bool] = lambda: False

    def close(self) -> None:
        """Stop the threads that run a round's effects (if any were started)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def take_hand_overs(self, should_stop: Callable[[], bool]) -> None:
        """A drive begins: for `HANDOVER_S` (a driver with `holds`), freed slots' next runs
        are handed to it, until `should_stop`."""
        self._should_stop = should_stop
        self._handover_until = time.monotonic() + HANDOVER_S if self.holds else 0.0

    def stop_hand_overs(self) -> None:
        """A drive ends: no more hand-overs (those not taken yet: `take_handed`)."""
        self._handover_until = 0.0

    def take_handed(self) -> list[tuple[str, Handover]]:
        """The runs handed over since last asked, as (limit name, hand-over)."""
        with self._handed_lock:
            handed, self._handed = self._handed, []
        return handed

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
        for the retry); an unexpected exception is returned, to fail this run only. Limited
        calls first take their places (persistence/capacity.py), given back whatever happens;
        a refusal is returned (the store released the run, which waits for capacity)."""
        done: list[Executed] = []
        load, now = self.host.load, self.host.clock.now()
        try:
            places = load.places(x.machine, x.snapshot.context, x.pending)
            handed, x.handed = x.handed, frozenset()
            asking = [p for p in places if p not in handed]
            if asking:
                grant = load.enter(x.run, self.owner, asking, now, self.lease_ms)
                if not grant.granted:  # (released to wait: the slots it was handed go back)
                    load.leave([p for p in places if p in handed], now, self.lease_ms)
                    return grant
            try:
                for key, kind, payload in x.pending:
                    with self.telemetry.effect(x.run, kind, payload, key) as outcome:
                        done.append(self.executor.execute(x.machine, kind, payload, key))
                        outcome(done[-1].outcome.status, done[-1].outcome.error)
                    if done[-1].transient is not None:
                        break
            finally:
                if places:
                    now = self.host.clock.now()
                    self.handed_over(load.leave(places, now, self.lease_ms, self.taker()))
                    load.pause_after(places, done, now)
        except Exception as exc:  # a bug or a hostile payload: this run fails, not the thread
            return exc
        return done

    def taker(self) -> str | None:
        """The owner to hand freed slots' next runs to (this driver, while it takes them)."""
        if time.monotonic() < self._handover_until and not self._should_stop():
            return self.owner
        return None

    def handed_over(self, handed: list[tuple[str, Handover]]) -> None:
        """Runs a release handed to this driver (leased to it): stepped from the next round,
        their leases kept by the heartbeat from now."""
        if handed:
            with self._handed_lock:
                self._handed += handed
            if self.holds is not None:
                self.holds({h.run.id for _, h in handed}, True)

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
        grant = self.host.load.enter(run, self.owner, [place], now, self.lease_ms)
        if not grant.granted:
            self.waiting(run, grant)
        return grant.granted

    def leave_workflows(self, runs: Sequence[RunRecord]) -> None:
        places = []
        for run in runs:
            try:
                place = self.host.load.workflow_place(run)
            except LimitKeyError:  # (an ended run without its key: it took no place)
                continue
            if place is not None:
                places.append(place)
        if places:
            self.host.load.leave(places, self.host.clock.now(), self.lease_ms)
