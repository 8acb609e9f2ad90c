"""`Worker`: threads that claim runs under a lease, step them, and survive database outages.

Each of the `concurrency` threads has its own lease owner id (`<worker id>/<n>`), claims one run
at a time and drives it (see `persistence.driver`). A heartbeat thread extends the leases of the
runs being driven. Recovery is continuous: a lease that was not renewed expires and the run is
due again, so any worker's next claim takes it back (the claim re-checks the row under lock).
Database errors make the thread back off exponentially and try again; a step that did not commit
is recomputed from the stored state.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from types import FrameType

from persistence.calls import CallExecutor
from persistence.capacity import LimitKeyError
from persistence.driver import RunDriver
from persistence.runtime import Runtime
from persistence.scheduling import ScheduledStart
from persistence.stores import PendingWork, RunRecord, StoreError, StoreUnavailableError
from persistence.telemetry import RunEvent, events
from persistence.wakeup import Wakeup

log = logging.getLogger("statecharts.worker")


class WorkerCrashed(RuntimeError):
    """A worker thread died (a bug past every per-run guard): `Worker.run` stops the others and
    raises this, so the process exits non-zero and a supervisor restarts it."""


class Worker:
    """Runs workflows from `runtime.store` with `concurrency` threads.

    `batch`: how many runs each thread claims and steps together. A round executes their pending
    effects at once (one helper thread per run, each run's own effects in order), then commits
    all their steps in one transaction: fewer commits to disk, and calls of different runs wait
    on the network together rather than one after another.
    A thread that finds no work waits for a wake-up (a start or a sent event, in this process
    or, on PostgreSQL, from any process by NOTIFY: `persistence.wakeup`) or `poll_ms`, which
    is still how timers coming due and expired leases are found; so does a thread whose last
    claim took fewer than `batch` runs, once it has stepped them.
    `lease_ms`: how long a claim lasts without a heartbeat (a SIGKILLed worker's runs are taken
    over after at most this long). `poll_ms`: sleep when there is no work. `report_every_s`:
    how often stuck runs and runs of unknown definitions are logged. `schedules`: scheduled
    starts this worker ticks (every worker may tick the same ones; each slot fires once).
    """

    def __init__(
        self,
        runtime: Runtime,
        concurrency: int = 1,
        *,
        batch: int = 16,
        lease_ms: int = 30_000,
        poll_ms: int = 200,
        stuck_after_ms: int = 3_600_000,
        report_every_s: float = 60.0,
        worker_id: str | None = None,
        schedules: Sequence[ScheduledStart] = (),
        call_threads: int = 32,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        if lease_ms < 100:
            raise ValueError(f"lease_ms must be at least 100, got {lease_ms}")
        self.runtime = runtime
        self.call_threads = call_threads
        self.schedules = tuple(schedules)
        self.concurrency = concurrency
        self.batch = batch
        self.lease_ms = lease_ms
        self.poll_s = poll_ms / 1000
        self.stuck_after_ms = stuck_after_ms
        self.report_every_s = report_every_s
        self.id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._wakeup: Wakeup | None = None
        self._held: dict[str, set[str]] = {}  # owner -> run ids being driven
        self._unleased: set[str] = set()  # of those, stepped with no lease until a commit
        self._held_lock = threading.Lock()
        self._versions: set[tuple[str, str]] = set()
        self._calls: CallExecutor | None = None  # while `run` serves
        self._versions_at = 0.0
        self.steps = 0
        self._steps_lock = threading.Lock()

    # -- control ----------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask every thread to finish its current step, release its lease and exit."""
        self._stop.set()
        if self._wakeup is not None:
            self._wakeup.notify()  # threads waiting for work see the stop at once

    @property
    def stopping(self) -> bool:
        """True once `stop()` was called (or SIGTERM/SIGINT received under `run()`)."""
        return self._stop.is_set()

    def run(self) -> None:
        """Work until SIGTERM/SIGINT (or `stop()`), then finish the steps in progress."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._on_signal)
        log.info(
            "worker %s: %d thread(s), store %s", self.id, self.concurrency, self.runtime.store.url
        )
        self._wakeup = self.runtime.store.wakeup()
        threads = [
            threading.Thread(target=self._loop, args=(f"{self.id}/{n}",), name=f"worker-{n}")
            for n in range(self.concurrency)
        ]
        beat = threading.Thread(target=self._heartbeats, name="heartbeat", daemon=True)
        beat.start()
        calls = self._calls = self.calls()
        self.runtime.attach_executor(calls)  # (runs started or sent to here: their calls)
        last_report = 0.0
        dead: list[str] = []
        try:
            calls.start()
            for t in threads:
                t.start()
            while not self._stop.wait(0.2):
                dead = [t.name for t in (*threads, beat) if not t.is_alive()]
                if not calls.is_alive():
                    dead.append("calls")
                if dead and self._stop.is_set():  # a signal since the wait: they end as they should
                    dead = []
                    break
                if dead:  # never serve on with fewer threads in silence
                    log.critical(
                        "worker %s: thread(s) %s died; stopping so that the process exits "
                        "non-zero and is restarted",
                        self.id,
                        ", ".join(dead),
                    )
                    self.stop()
                    break
                self._tick_schedules()
                if time.monotonic() - last_report >= self.report_every_s:
                    last_report = time.monotonic()
                    self._report()
        finally:  # (a bug or a thread that would not start: no start here hands calls
            # to an executor nobody serves)
            self.runtime.detach_executor(calls)
        for t in threads:
            t.join()
        calls.stop()
        log.info("worker %s stopped after %d steps", self.id, self.steps)
        if dead:
            raise WorkerCrashed(f"worker {self.id}: thread(s) {', '.join(dead)} died")

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.info("worker %s: signal %d, finishing current steps", self.id, signum)
        self.stop()

    def run_until_idle(self, max_rounds: int = 1_000_000, *, calls: bool = True) -> int:
        """Drive every run that has work due now (at the runtime clock's time), and run every
        call due, until none has; return the number of steps committed. Single-threaded; for
        tests and demos. `calls=False` steps the runs only: their calls stay due (a test that
        chooses when each call ends runs them with `run_one_call`)."""
        owner = f"{self.id}/idle"
        executor = self.calls()
        driver = self._driver(owner, executor if calls else None)
        before = self.steps
        self._tick_schedules()
        try:
            for _ in range(max_rounds):
                claimed, work = self._claim(owner, self.batch)
                if claimed:
                    self._add_steps(
                        driver.drive(driver.claimed(claimed, work), lambda: False).steps
                    )
                    continue
                stepped = executor.driver.committed
                if not calls or not executor.run_until_idle():
                    break
                self._add_steps(executor.driver.committed - stepped)  # (each end's step)
        finally:
            driver.close()
        return self.steps - before

    def run_one_call(self) -> bool:
        """Run the oldest due call here, recording its end with the step of its result; the
        calls that step records stay due. False when no call is due. For tests that choose
        when each call ends (`statecharts.testing.durable`)."""
        executor = CallExecutor(
            self.runtime, f"{self.id}/one", lease_ms=self.lease_ms, takes_new=False
        )
        return executor.run_one()

    def calls(self) -> CallExecutor:
        """The executor of the calls this worker runs beside their runs (`persistence.calls`)."""
        return CallExecutor(
            self.runtime, f"{self.id}/calls", lease_ms=self.lease_ms, threads=self.call_threads
        )

    # -- threads ----------------------------------------------------------------------------
    def _driver(self, owner: str, calls: CallExecutor | None) -> RunDriver:
        """A driver leasing under `owner` whose steps lease their calls to `calls`; the runs
        it lets go of are told to the heartbeat."""
        return RunDriver(
            self.runtime,
            owner,
            self.lease_ms,
            parallel=self.batch,
            calls=calls,
            holds=lambda run_ids, held: self._hold(owner, run_ids, held),
        )

    def _loop(self, owner: str) -> None:
        driver = self._driver(owner, self._calls)
        try:
            self._serve(owner, driver)
        finally:
            driver.close()

    def _serve(self, owner: str, driver: RunDriver) -> None:
        backoff = 0.0
        wakeup = self._wakeup or self.runtime.store.wakeup()
        orphans: set[str] = set()  # runs we still lease but stopped driving (store outage)
        claim, claimed_at = True, 0.0  # claim first; then after full claims, unnamed wake-ups,
        while not self._stop.is_set():  # runs left to a claim, or a poll interval
            try:
                for run_id in sorted(orphans):
                    self.runtime.store.release(run_id, owner, self.runtime.clock.now())
                    orphans.discard(run_id)
                seen, unnamed = wakeup.seen(), wakeup.unnamed()  # before looking for work
                named = wakeup.take_named()
                if named:  # sent events name their runs: read and step them, no claim
                    orphans |= set(named)
                    claim = self._step_named(owner, driver, named) or claim
                    orphans -= set(named)
                full = False
                if claim:
                    claimed, work = self._claim(owner, self.batch)
                    ids = {run.id for run in claimed}
                    self._hold(owner, ids, True)
                    orphans |= ids
                    try:
                        taken = driver.claimed(claimed, work)
                        self._add_steps(driver.drive(taken, self._stop.is_set).steps)
                    finally:
                        self._hold(owner, ids, False)
                    orphans -= ids
                    full = len(claimed) >= self.batch
                    claimed_at = time.monotonic()  # the poll interval counts from here
                backoff = 0.0
                # A short claim took all that was due then; what came since woke us (`seen`
                # is older than the claim), so claim again at once only after a full one.
                claim = full
                if not full and not self._stop.is_set():
                    left = self.poll_s - (time.monotonic() - claimed_at)
                    if left > 0:
                        wakeup.wait(seen, left)
                    claim = (
                        wakeup.unnamed() != unnamed or time.monotonic() - claimed_at >= self.poll_s
                    )
            except StoreUnavailableError as exc:
                backoff = min(max(backoff * 2, 0.1), 5.0)
                log.warning(
                    "worker %s: store unavailable (%s); retrying in %.1fs", owner, exc, backoff
                )
                claim = True
                self._stop.wait(backoff)
            except Exception as exc:  # a bug or a constraint we did not expect: keep serving
                log.exception("worker %s: %s: %s", owner, type(exc).__name__, exc)
                claim = True
                self._stop.wait(1.0)

    def _step_named(self, owner: str, driver: RunDriver, run_ids: list[str]) -> bool:
        """Step the runs sent events named, read by id without a claim (`Planner.unleased`);
        True when some of them are left to a claim (held by a worker, pending effects, a
        version this worker cannot step, ...)."""
        versions = self._steppable()
        found = self.runtime.store.read_work(run_ids)
        mine = [
            (run, work)
            for run, work in found
            if (run.workflow_name, run.workflow_version) in versions
        ]
        ids = {run.id for run, _ in mine}
        self._hold(owner, ids, True, unleased=True)  # for the heartbeat, once a commit leases
        try:
            drove = driver.drive(driver.planner.unleased(mine), self._stop.is_set)
        finally:
            self._hold(owner, ids, False)
        self._add_steps(drove.steps)
        return drove.left_to_claim or len(mine) < len(found)

    def _claim(self, owner: str, limit: int) -> tuple[list[RunRecord], dict[str, PendingWork]]:
        """Lease up to `limit` runs with their pending work (one round trip on PostgreSQL)."""
        versions = self._steppable()
        now = self.runtime.clock.now()
        found = self.runtime.store.claim_work(owner, now, self.lease_ms, limit, versions)
        claimed = [run for run, _ in found]
        if claimed:
            self.runtime.telemetry.claimed(claimed, now)
        return claimed, {run.id: work for run, work in found}

    def _steppable(self) -> set[tuple[str, str]]:
        """Versions to claim, refreshed every few seconds (migratable ones appear over time)."""
        if time.monotonic() - self._versions_at > 5.0 or not self._versions:
            self._versions = self.runtime.steppable_versions()
            self._versions_at = time.monotonic()
        return self._versions

    def _hold(self, owner: str, run_ids: set[str], held: bool, unleased: bool = False) -> None:
        with self._held_lock:
            if unleased:
                self._unleased = self._unleased | run_ids if held else self._unleased - run_ids
            runs = self._held.setdefault(owner, set())
            if held:
                runs |= run_ids
            else:
                runs -= run_ids

    def _add_steps(self, n: int) -> None:
        with self._steps_lock:
            self.steps += n

    def _heartbeats(self) -> None:
        """Extend the leases of runs being driven, every third of the lease."""
        while not self._stop.wait(self.lease_ms / 3000):
            with self._held_lock:
                held = {owner: set(ids) for owner, ids in self._held.items() if ids}
                unleased = self._unleased
            for owner, ids in held.items():
                try:
                    kept = self.runtime.store.heartbeat(
                        owner, ids, self.runtime.clock.now(), self.lease_ms
                    )
                except StoreError as exc:
                    log.warning("worker %s: heartbeat failed: %s", owner, exc)
                    continue
                for lost in ids - kept - unleased:  # (no lease yet is not a lease lost)
                    log.warning("run %s: lease lost by %s", lost, owner)

    def _tick_schedules(self) -> None:
        """Fire due scheduled starts (each slot starts one run across all workers)."""
        for schedule in self.schedules:
            try:
                started = schedule.tick()
            except (StoreError, LimitKeyError) as exc:  # (the slot is not lost: next tick)
                log.warning("schedule %s: tick failed: %s", schedule.name, exc)
                continue
            if started is not None:
                log.info("schedule %s started run %s", schedule.name, started)

    def _report(self) -> None:
        """Log stuck runs and runs no definition here can step, turn events left queued for
        ended runs into dead letters (never left in silence), hand over limits' slots freed
        by expired leases, and apply the workflows' retention (a bounded batch)."""
        try:
            self.runtime.load.sweep(self.runtime.clock.now(), self.lease_ms)
            stuck = self.runtime.stuck(self.stuck_after_ms, limit=20)
            unknown = self.runtime.unknown_versions()
            dead = self.runtime.store.sweep_dead_letters(self.runtime.clock.now())
            purged = self.runtime.apply_retention()  # bounded: a batch per workflow
        except StoreError as exc:
            log.warning("worker %s: report failed: %s", self.id, exc)
            return
        if purged:
            log.info("worker %s: retention purged %d ended run(s)", self.id, purged)
        for letter in dead:
            event_type = letter.event.get("type")
            try:
                run = self.runtime.store.get_run(letter.run_id)
            except StoreError:
                log.warning(
                    "run %s (?): event %r dead-lettered: %s",
                    letter.run_id,
                    event_type,
                    letter.reason,
                )
                continue
            self.runtime.telemetry.report(
                RunEvent(
                    events.DEAD_LETTER,
                    run.id,
                    run.workflow_name,
                    run.key,
                    run.state,
                    f"run {run.id} ({run.workflow_name}, key {run.key}, state {run.state}): event "
                    f"{event_type!r} dead-lettered: {letter.reason}",
                    traceparent=run.traceparent,
                    fields={"event_type": event_type, "reason": letter.reason},
                )
            )
        now = self.runtime.clock.now()
        for run in stuck:
            if run.wake_at is not None:
                why = f"due since {now - run.wake_at} ms and no worker took it"
            else:
                why = "waiting for an event"
            log.warning(
                "stuck run %s (%s, state %s): not updated for over %d ms, %s",
                run.id,
                run.workflow_name,
                run.state,
                self.stuck_after_ms,
                why,
            )
        for v in unknown:
            log.warning(
                "%d active run(s) of %s version %s (label %s): no definition or migration here",
                v.runs,
                v.workflow_name,
                v.workflow_version,
                v.label,
            )
