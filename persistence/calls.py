"""`CallExecutor`: a worker's calls, run beside their runs.

A step that enters an invoking state records its call (`workflow_calls`, `stores/calls.py`) and
leaves its run at rest. An executor leases due calls, runs plain functions on a thread pool and
coroutines on one asyncio loop (so a process holds thousands of waiting calls), renews its leases
while they run, and records each end with the result event queued in the run's inbox, applied by
the run's next step like any other event. Meanwhile the run's timers fire, its events are
applied and it can be cancelled: a step that leaves the invoking state, or ends the run, stops
the call in its own transaction; the executor then tells the call (asyncio cancellation for a
coroutine, `heartbeat()` / `call_stopped()` for a function) and its result is never applied.

Per call site (the invoke's `timeout`, `heartbeatTimeout`), an attempt that runs too long or
stops heartbeating fails with `CallTimeoutError` / `CallHeartbeatTimeoutError`, which `retry`
and `onError` match like any error. A failure the call site declares `transient` is attempted
again with the runtime's transient backoff, with the same idempotency key; so is a call whose
worker died (its lease expired), each attempt recorded (`workflow_call_attempts`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from persistence import outbox
from persistence.capacity import LimitKeyError, Place
from persistence.driver import RunDriver
from persistence.end_writers import EndWriters
from persistence.outbox import (
    CallContext,
    CallPlan,
    Executed,
    Executor,
    _accepts_key,
    call_context,
    running_call,
    traceback_text,
)
from persistence.stores import (
    CallEnd,
    CallFinish,
    CallRecord,
    RunFinishedError,
    RunNotFoundError,
    RunRecord,
    StoreError,
    StoreUnavailableError,
)
from persistence.stores.codec import PayloadCodecError
from persistence.stores.rules import run_of_outbox_key
from persistence.telemetry import UNOBSERVED, RunEvent, events
from statecharts import Machine
from statecharts.errors import CallTimeoutError
from statecharts.events import error_actor_event_type

if TYPE_CHECKING:
    from persistence.runtime import Runtime
    from persistence.wakeup import Wakeup

log = logging.getLogger("statecharts.calls")

Outcome = Callable[[str, str | None], None]
"""What an attempt reports its outcome to (`Telemetry.effect`'s yielded function)."""

TIMEOUT_ERROR = CallTimeoutError.__name__
HEARTBEAT_ERROR = "CallHeartbeatTimeoutError"
LOST_ERROR = "CallAttemptsExhaustedError"
CLAIM_BATCH = 500
"""At most this many calls are claimed at once (a burst of due calls)."""
CLAIM_EVERY_S = 0.01
"""How often, at most, a serving loop claims when nothing says a claim would find more: no
wake-up, no full claim, no slot given back (`CallExecutor._may_find`)."""
FINISH_BATCH = 500
"""At most this many call ends are recorded in one transaction (a burst of ends)."""


@dataclass(frozen=True, slots=True)
class _Claimed:
    """A serving loop's last claim: the wake-ups seen before it, when (monotonic), and whether
    it took as many calls as it asked for (more may be due)."""

    seen: int
    at: float
    full: bool


@dataclass(slots=True)
class _Running:
    """A call this executor holds, while its attempt runs."""

    call: CallRecord
    run: RunRecord  # as read or committed when the call was taken (its trace, its name)
    plan: CallPlan
    context: CallContext
    started: float
    timeout_s: float | None
    heartbeat_s: float | None
    task: asyncio.Task[Any] | None = None  # a coroutine's, on the executor's loop, till it ends
    ended: bool = field(default=False)
    executed: Executed | None = None  # how it ended, once recorded (a Retry-After pauses)
    places: list[Place] = field(default_factory=list)
    """Its limits' places (`LoadControl.call_places`): asked before it starts, the slots of
    those granted given back after its end, whatever the end."""

    def deadline(self) -> float | None:
        """When (monotonic) this attempt times out unless it ends, or beats, before (None:
        never)."""
        if self.timeout_s is None and self.heartbeat_s is None:
            return None
        ends = [self.started + self.timeout_s] if self.timeout_s is not None else []
        if self.heartbeat_s is not None:
            ends.append(self.context.beat_at + self.heartbeat_s)
        return min(ends)


class CallExecutor:
    """Runs the calls of `runtime`'s store beside their runs, under lease owner `owner`."""

    def __init__(
        self,
        runtime: Runtime,
        owner: str,
        *,
        lease_ms: int = 30_000,
        threads: int = 32,
        max_calls: int = 10_000,
        poll_ms: int = 100,
        max_steps: int = 1000,
        takes_new: bool = True,
    ) -> None:
        self.runtime = runtime
        self.owner = owner
        self.lease_ms = lease_ms
        self.threads = threads
        self.max_calls = max_calls
        self.poll_s = poll_ms / 1000
        self.executor = Executor(
            runtime.listeners, runtime.breaker, runtime.clock.now, runtime.dry_run
        )
        self._running: dict[str, _Running] = {}
        self._adopted: deque[tuple[CallRecord, RunRecord, Machine]] = deque()
        self._lock = threading.Lock()
        self._leased = 0  # calls leased to it and not yet ended (adopted, running)
        self._held: set[str] = set()
        """Keys of calls leased to it that wait to start (adopted or claimed): their leases are
        renewed too, so that a serving loop slow to record ends (a run's row held) lets none
        expire for another worker to run it beside this one."""
        self._recording: dict[str, Any] = {}
        """Calls that ended here and whose ends are being recorded (key: heartbeat details):
        renewed too, or a slow record (a burst of ends, a store's writer lock held) lets the
        lease of a call that already ran lapse, and another worker runs it again. (A renewal
        waits for no row a recording transaction holds: `heartbeat_calls`.)"""
        self._lost: set[str] = set()  # held keys the store says it no longer holds
        self._parked: set[str] = set()  # held keys a refusal of their limit queued (released)
        self._poke = threading.Event()
        self._claimed: _Claimed | None = None  # the serving loop's last claim
        self._unstarted: list[tuple[CallRecord, RunRecord | None, Machine | None]] = []
        """Calls the serving loop took (adopted or claimed) and has yet to start (`_start`)."""
        self._owed_claim = False  # the serving loop made calls due that only a claim finds
        new_driver = partial(
            RunDriver, runtime, owner, lease_ms, max_steps, calls=self if takes_new else None
        )
        self.driver = new_driver()
        """Records each call's end with the step that applies its result (`RunDriver.send`);
        the calls those steps record are leased to this executor in the same commit (unless
        `takes_new` is False: they are left due for any executor)."""
        self._writes = EndWriters(new_driver, f"call-ends-{owner}")
        """Writes the serving loop's bursts of ends (each writer with a driver like `driver`)."""
        self._ended: queue.SimpleQueue[tuple[_Running, Any, BaseException | None]] = (
            queue.SimpleQueue()
        )
        self._stop = threading.Event()
        self._pool: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._thread: threading.Thread | None = None
        self._batch: list[tuple[CallFinish, str, dict[str, Any]]] | None = None
        self.finished = 0  # (counted under `_lock`: bursts are written by `_writes`' threads)

    # -- taking calls (`driver.CallTaker`) ------------------------------------------------------
    def lease(self, count: int) -> tuple[str, int] | None:
        """(owner, until) for `count` more calls a step records, or None when full."""
        if self._leased + count > self.max_calls:
            return None
        return self.owner, self.runtime.clock.now() + self.lease_ms

    def adopt(self, calls: Sequence[CallRecord], run: RunRecord, machine: Machine) -> None:
        """Run these calls of `run` next (a committed step leased them to this executor)."""
        with self._lock:
            self._adopted.extend((call, run, machine) for call in calls)
            self._held.update(call.idempotency_key for call in calls)
            self._leased += len(calls)
        if not self._poke.is_set():  # (still set: the serving loop has yet to look; `Inline`
            self._poke.set()  # never clears it, and each set takes the Event's condition)

    def _take_adopted(self) -> list[tuple[CallRecord, RunRecord | None, Machine | None]]:
        with self._lock:
            taken: list[tuple[CallRecord, RunRecord | None, Machine | None]] = [*self._adopted]
            self._adopted.clear()
        return taken

    def _released(self) -> None:
        with self._lock:
            self._leased = max(0, self._leased - 1)

    # -- control ------------------------------------------------------------------------------
    def start(self) -> None:
        """Serve in a thread of its own until `stop`, its calls' leases renewed by another
        (a serving loop busy recording ends must not let a running call's lease run out)."""
        self._thread = threading.Thread(target=self._serve, name="calls", daemon=True)
        self._thread.start()
        threading.Thread(target=self._heartbeats, name="call-heartbeats", daemon=True).start()

    def stop(self) -> None:
        """Stop claiming; calls still running are left to their leases (another worker takes
        them over once those expire, with the same idempotency keys)."""
        self._stop.set()
        self._poke.set()
        if self._thread is not None:
            self._thread.join()
        self._close()

    def is_alive(self) -> bool:
        """Whether its thread still serves (False before `start` and after `stop`)."""
        return self._thread is not None and self._thread.is_alive()

    def run_until_idle(self, claim: bool = True, run_id: str | None = None) -> int:
        """Run the calls handed to it and (`claim`) every call due now (at the runtime clock's
        time; of run `run_id` only, if given), one at a time in this thread, until none is
        left; the number of calls that ended. For callers that run their own calls (`Inline`),
        tests and demos: no timeout can cut a call short here."""
        before = self.finished
        while True:
            ready = self._take_adopted()
            if not ready and claim:
                ready = [(call, None, None) for call in self._claim(1, run_id)]
            if not ready:
                return self.finished - before
            for call, run, machine in ready:
                self._run_here(call, run, machine)

    def run_one(self) -> bool:
        """Claim the oldest due call and run it here to its end; False when none is due."""
        for call in self._claim(1):
            self._run_here(call, None, None)
            return True
        return False

    def _run_here(self, call: CallRecord, run: RunRecord | None, machine: Machine | None) -> None:
        """Run `call` in this thread to its end, and record it."""
        with self._lock:
            self._held.discard(call.idempotency_key)  # (not renewed here: nothing runs beside)
        running = self._begin(call, run, machine)
        if running is None or not self._placed(running):
            return
        try:
            result = _in_thread(running, self._observed(running))
        except Exception as exc:
            self._end(running, None, exc)
        else:
            self._end(running, result, None)
        self._give_back(running)

    # -- the serving loop ---------------------------------------------------------------------
    def _serve(self) -> None:
        wakeup = self.runtime.store.wakeup()
        wakeup.subscribe(self._poke)
        try:
            self._serve_until_stopped(wakeup)
        finally:
            wakeup.unsubscribe(self._poke)

    def _serve_until_stopped(self, wakeup: Wakeup) -> None:
        while not self._stop.is_set():
            try:
                seen = wakeup.seen()
                self._settle()
                ready = self._unstarted
                ready += self._take_adopted()
                free = min(self.max_calls - self._leased, CLAIM_BATCH)
                if free <= 0:  # (its steps leave their calls to any executor meanwhile)
                    self._owed_claim = True
                elif self._may_find(seen):
                    claimed = self._claim(free)
                    self._claimed = _Claimed(seen, time.monotonic(), len(claimed) == free)
                    with self._lock:
                        self._leased += len(claimed)
                        self._held.update(call.idempotency_key for call in claimed)
                    ready += self._with_runs(claimed)
                took = bool(ready)
                self._start(ready)
                upcoming = self._watch()
                if not took:
                    self._wait(wakeup, seen, upcoming)
            except StoreError as exc:  # (what it took and had not started: the next look's)
                log.warning("calls %s: store error (%s); retrying", self.owner, exc)
                self._stop.wait(1.0)
            except Exception:  # a bug: logged, never a silent death of the thread
                log.exception("calls %s: unexpected error", self.owner)
                self._let_go(self._unstarted)
                self._stop.wait(1.0)

    def _start(self, ready: list[tuple[CallRecord, RunRecord | None, Machine | None]]) -> None:
        """Start the calls taken (`ready`, which is `_unstarted`): each leaves the list once
        started, or found lost or ended without running, so that a look that fails midway
        (the store gone between a claim and a start) leaves the rest to the next look. They
        are this executor's (their leases renewed meanwhile): dropped, they would be held
        for ever, never run (what a worker whose connections were killed did)."""
        starting: list[_Running] = []
        handled = 0
        try:
            for call, run, machine in ready:
                if not self._was_lost(call):
                    running = self._begin(call, run, machine)
                    if running is not None and self._placed_or_left(running):
                        starting.append(running)
                    else:
                        with self._lock:
                            self._held.discard(call.idempotency_key)
                handled += 1
        finally:
            del ready[:handled]
            self._launch(starting)

    def _let_go(self, unstarted: list[tuple[CallRecord, RunRecord | None, Machine | None]]) -> None:
        """Stop holding calls a look took and could not start (a bug raised): their leases
        are no longer renewed, so they lapse and a claim takes them again (their open
        attempts closed `lost`), here or in another worker."""
        with self._lock:
            for call, _, _ in unstarted:
                if call.idempotency_key in self._held:
                    self._held.discard(call.idempotency_key)
                    self._leased = max(0, self._leased - 1)
        unstarted.clear()

    def _may_find(self, seen: int) -> bool:
        """Whether a claim now may find calls the last one did not: the first, one after a
        wake-up (`seen`: a start or a sent step recorded calls), after a full claim, after
        this executor gave slots back (the store made queued calls due) or was full (its
        steps left their calls to any executor: `lease`), else at most every
        `CLAIM_EVERY_S` (calls due without a wake-up: a retry's backoff, a lapsed lease
        elsewhere, a run's effects done). A chain of steps, each adopting its next call,
        claimed beside every step before: a round trip that found nothing. (Its state is the
        serving thread's own.)"""
        last, owed = self._claimed, self._owed_claim
        self._owed_claim = False
        return (
            owed
            or last is None
            or last.full
            or last.seen != seen
            or time.monotonic() - last.at >= CLAIM_EVERY_S
        )

    def _wait(self, wakeup: Wakeup, seen: int, upcoming: float | None) -> None:
        """Until a call ends, one is adopted, work may have arrived (a wake-up of the store's:
        a start or a step may have recorded calls), a running attempt's deadline comes
        (`upcoming`, monotonic) or the poll interval passes. Each of those sets `_poke` (the
        store's wake-ups through `Wakeup.subscribe`): no slice of sleep delays an end's
        record or a new call's start (a start's call waited up to 20 ms here, an end 5 ms)."""
        timeout = self.poll_s if upcoming is None else upcoming - time.monotonic()
        self._poke.clear()  # (what set it before this looked is seen by the checks below)
        if (
            self._ended.empty()
            and not self._adopted
            and wakeup.seen() == seen
            and not self._stop.is_set()
        ):
            self._poke.wait(max(0.0, min(self.poll_s, timeout)))

    def _claim(self, limit: int, run_id: str | None = None) -> list[CallRecord]:
        return self.runtime.store.claim_calls(
            self.owner, self.runtime.clock.now(), self.lease_ms, limit, run_id
        )

    def _begin(
        self, call: CallRecord, run: RunRecord | None, machine: Machine | None
    ) -> _Running | None:
        """What running `call` (of `run`, of `machine`: read when not known) takes, or None
        when it ended without running (recorded)."""
        if call.problem is not None:  # its input does not open here (a missing key)
            self._finish_error(call, PayloadCodecError.__name__, call.problem, "failed")
            return None
        if run is None or machine is None:
            run = self._run_of(call)
            machine = None if run is None else self.runtime.machine_for(run)
        if run is None or machine is None:  # (a run deleted, or of a version not here)
            self._retry(call, CallEnd("lost", None, "no definition here for its run"))
            return None
        policy = self.runtime.transient
        if call.attempt > policy.max_attempts:
            self._finish_error(
                call,
                LOST_ERROR,
                f"invoke {call.call_id!r}: attempt {call.attempt} of at most {policy.max_attempts}",
                "failed",
            )
            return None
        planned = self.executor.plan_call(machine, call.payload, call.idempotency_key)
        if isinstance(planned, Executed):
            self._record(call, planned, None)
            return None
        try:
            places = self.runtime.load.call_places(machine, run, call)
        except LimitKeyError as exc:  # never made without its place: failed, saying why
            self._finish_error(call, LimitKeyError.__name__, str(exc), "failed")
            return None
        invoke = planned.site
        timeout = None if invoke is None or invoke.timeout_ms is None else invoke.timeout_ms / 1000
        beat = None if invoke is None or invoke.heartbeat_ms is None else invoke.heartbeat_ms / 1000
        return _Running(
            call, run, planned, CallContext(), time.monotonic(), timeout, beat, places=places
        )

    def _placed(self, running: _Running) -> bool:
        """Whether `running` may start: it needs no place, or the store granted each (one
        limit at a time). Refused, it was released by the store to wait (pending, why on its
        row, queued for a slot in arrival order, due again when one is freed for it or its
        window or pause ends); its run goes on meanwhile."""
        if not running.places:
            return True
        call, now = running.call, self.runtime.clock.now()
        grant = self.runtime.load.enter(
            call.run_id, self.owner, running.places, now, self.lease_ms, call.idempotency_key
        )
        if grant.granted:
            return True
        running.places = []
        self._released()
        if grant.released:  # claimed here with it, queued with it: not asked for one by one
            with self._lock:
                self._parked.update(grant.released)
        self.runtime.telemetry.waiting(running.run, grant.reason or "")
        log.debug(
            "call %s (%s) of run %s: %s, looks again at %s",
            call.idempotency_key,
            call.call_id,
            call.run_id,
            grant.reason,
            grant.retry_at,
        )
        return False

    def _placed_or_left(self, running: _Running) -> bool:
        """`_placed`, in the serving loop: a store that fails while the call asks leaves the
        call to its lease (not renewed: another claim takes it, with the same key, once it
        expires), never held here without running."""
        try:
            return self._placed(running)
        except StoreError as exc:
            self._released()
            log.warning(
                "call %s (%s): its limit's place could not be asked (%s); left to its lease",
                running.call.idempotency_key,
                running.call.call_id,
                exc,
            )
            return False

    def _give_back(self, running: _Running) -> None:
        """After `running`'s end is recorded (or it was stopped, or timed out): a failure
        carrying a `retry_after` pauses its limits for every run, then its slots go back, each
        to the next in its queue (woken). Its run's place (`run:<id>`) is the run's: its next
        drive gives it back once none of its calls is open; only a run that ended meanwhile
        (cancelled, say: no drive follows) has it given back here."""
        places, running.places = running.places, []
        if not places:
            return
        self._owed_claim = True  # (a slot given back makes the next queued call due)
        load, now = self.runtime.load, self.runtime.clock.now()
        if running.executed is not None:
            load.pause_after(places, [running.executed], now)
        mine = [p for p in places if not p[1].startswith("run:")]
        if len(mine) < len(places) and not self._active(running.call.run_id):
            mine = places
        load.leave(mine, now, self.lease_ms)

    def _active(self, run_id: str) -> bool:
        """Whether run `run_id` is still active (a store error: taken as active, its place
        then comes back by its liveness, at a sweep)."""
        try:
            return self.runtime.store.get_run(run_id).status == "active"
        except RunNotFoundError:
            return False
        except StoreError:
            return True

    def _was_lost(self, call: CallRecord) -> bool:
        """Whether the store said, while `call` waited to be launched, that this executor no
        longer holds it (its lease ran out and another took it, or a refusal of its limit for
        another call queued it too, released): then it is not run here."""
        key = call.idempotency_key
        with self._lock:
            parked = key in self._parked
            if not parked and key not in self._lost:
                return False
            self._parked.discard(key)
            self._lost.discard(key)
            self._held.discard(key)
        self._released()
        if not parked:
            log.info("call %s (%s): taken over before it started here", key, call.call_id)
        return True

    def _launch(self, starting: Sequence[_Running]) -> None:
        """Start each of `starting`: a coroutine function's as a task on the loop, all of them
        handed to it at once (`_start_tasks`: one wake-up of the loop's thread for a burst of
        calls, not one each), a plain function's on the thread pool."""
        coroutines: list[tuple[_Running, Coroutine[Any, Any, Any]]] = []
        for running in starting:
            key = running.call.idempotency_key
            with self._lock:
                self._running[key] = running
                self._held.discard(key)
                self._lost.discard(key)  # (now stopped as it runs)
            if inspect.iscoroutinefunction(running.plan.fn):
                coroutines.append((running, _coroutine(running, self._observed(running))))
            else:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self.threads, f"calls-{self.owner}")
                done = self._pool.submit(_in_thread, running, self._observed(running))
                done.add_done_callback(partial(self._done, running))
        if coroutines:
            self._event_loop().call_soon_threadsafe(self._start_tasks, coroutines)

    def _start_tasks(self, coroutines: Sequence[tuple[_Running, Coroutine[Any, Any, Any]]]) -> None:
        """(on the loop) Run each coroutine as its call's task, whose end is handed to the
        serving loop (`_done`). A call stopped before its task started never runs it; one
        stopped while its task was being made is cancelled once it is (`_cancel` read no task
        yet, so it was stopped before the check after the task was set: that check sees it)."""
        for running, coroutine in coroutines:
            if running.context.stopped.is_set():
                coroutine.close()
                self._hand_end(running, None, asyncio.CancelledError())
                continue
            plan = running.plan
            context = call_context(running.context, plan.key, run_of_outbox_key(plan.outbox_key))
            task = running.task = asyncio.get_running_loop().create_task(coroutine, context=context)
            task.add_done_callback(partial(self._done, running))
            if running.context.stopped.is_set():
                task.cancel()

    def _observed(self, running: _Running) -> AbstractContextManager[Outcome]:
        """Around an attempt, in the thread or task that runs it: its effect span (the run's
        trace context current in it) and its effect metrics, as an in-step effect has."""
        call = running.call
        return self.runtime.telemetry.effect(
            running.run, "start_child", call.payload, call.idempotency_key, beside=True
        )

    def _done(self, running: _Running, future: Any) -> None:
        """(in the thread or loop that ran it) hand the end to the serving loop; the attempt
        lets go of its task, which has nothing left to cancel."""
        running.task = None
        try:
            result, error = future.result(), None
        except BaseException as exc:
            result, error = None, exc
        self._hand_end(running, result, error)

    def _hand_end(self, running: _Running, result: Any, error: BaseException | None) -> None:
        self._ended.put((running, result, error))
        if not self._poke.is_set():
            self._poke.set()

    def _settle(self) -> None:
        """Record the calls that ended since the last look, at most `FINISH_BATCH` of them
        (the rest at the next look, once the calls taken meanwhile have started: a backlog
        of ends held back the start of every call handed over behind it, by up to a second
        at 10,000 waiting calls): one alone here, with the step that applies its result (one
        transaction from rest); several (a burst of ends) each with its step too, all in one
        transaction written beside this loop (`_finish` batches while `_batch` is set;
        `EndWriters`). Their leases are renewed until their ends are written (`_recording`)."""
        ended: list[tuple[_Running, Any, BaseException | None]] = []
        while len(ended) < FINISH_BATCH:
            try:
                ended.append(self._ended.get_nowait())
            except queue.Empty:
                break
        if not ended:
            return
        self._batch = [] if len(ended) > 1 else None
        self._being_recorded(ended)
        recorded = False
        try:
            for running, result, error in ended:
                if not running.ended:
                    self._end(running, result, error)
            recorded = True
        finally:
            batch, self._batch = self._batch, None
            done = partial(self._recorded, ended, recorded)
            if batch:
                runs = {r.call.run_id: r.run for r, _, _ in ended}
                run_ids = {run_id for _, run_id, _ in batch}
                self._writes.submit(run_ids, partial(self._finish_batch, batch, runs), done)
            else:
                done(True)

    def _being_recorded(self, ended: Sequence[tuple[_Running, Any, BaseException | None]]) -> None:
        """`ended` no longer run here; their leases are renewed until their ends are written
        (`_recorded`)."""
        with self._lock:
            for running, _, _ in ended:
                key = running.call.idempotency_key
                if self._running.pop(key, None) is not None and not running.ended:
                    self._recording[key] = running.context.details

    def _recorded(
        self,
        ended: Sequence[tuple[_Running, Any, BaseException | None]],
        recorded: bool,
        written: bool,
    ) -> None:
        """(where their ends were written) `ended`'s leases are no longer renewed; once each
        end was recorded and written, their slots go back."""
        with self._lock:
            for running, _, _ in ended:
                self._recording.pop(running.call.idempotency_key, None)
        if recorded and written:
            for running, _, _ in ended:
                self._give_back(running)
        if not self._poke.is_set():  # (a slot given back may make a queued call due)
            self._poke.set()

    def _finish_batch(
        self,
        batch: list[tuple[CallFinish, str, dict[str, Any]]],
        runs: Mapping[str, RunRecord],
        driver: RunDriver,
    ) -> None:
        """(in a writer of `_writes`) Record a burst of ends, each with the step that applies
        its result where its run is at rest (`driver.finish_calls`, handed `runs`: each call's
        run as read when it was taken), up to `FINISH_BATCH` per transaction and one end per
        run in each; a transaction the store refuses is recorded one end at a time."""
        while batch:
            part: list[tuple[CallFinish, str, dict[str, Any]]] = []
            later: list[tuple[CallFinish, str, dict[str, Any]]] = []
            seen: set[str] = set()
            for end in batch:
                fits = end[1] not in seen and len(part) < FINISH_BATCH
                (part if fits else later).append(end)
                seen.add(end[1])
            batch = later
            try:
                inbox_ids = driver.finish_calls(part, self.runtime.clock.now(), runs)
            except StoreUnavailableError:
                raise
            except StoreError as exc:  # (a run ended meanwhile, a value refused, ...)
                log.info(
                    "calls %s: %d ends not written together (%s: %s); one by one",
                    self.owner,
                    len(part),
                    type(exc).__name__,
                    exc,
                )
                inbox_ids = [self._finish_one(*end, driver) for end in part]
            with self._lock:
                self.finished += len(part)
            for (finish, _, _), inbox_id in zip(part, inbox_ids):
                if not inbox_id:
                    log.info(
                        "call %s: ended after it was stopped; its result is dropped", finish.key
                    )

    def _watch(self) -> float | None:
        """Time out attempts past their deadline (their leases are renewed by `_heartbeats`);
        the next deadline of those still running (monotonic; None: no attempt has one)."""
        now = time.monotonic()
        upcoming: float | None = None
        for running in list(self._running.values()):
            if running.ended:
                continue
            if running.timeout_s is not None and now - running.started > running.timeout_s:
                self._time_out(
                    running,
                    TIMEOUT_ERROR,
                    f"attempt {running.call.attempt} of "
                    f"invoke {running.call.call_id!r} took longer than "
                    f"{running.timeout_s * 1000:.0f} ms",
                )
            elif (
                running.heartbeat_s is not None
                and now - running.context.beat_at > running.heartbeat_s
            ):
                self._time_out(
                    running,
                    HEARTBEAT_ERROR,
                    f"attempt {running.call.attempt} of "
                    f"invoke {running.call.call_id!r} sent no heartbeat for "
                    f"{running.heartbeat_s * 1000:.0f} ms",
                )
            else:
                due = running.deadline()
                if due is not None and (upcoming is None or due < upcoming):
                    upcoming = due
        return upcoming

    def _heartbeats(self) -> None:
        """Renew the running calls' leases every third of a lease (its own thread)."""
        while not self._stop.wait(self.lease_ms / 3000):
            try:
                self._renew()
            except StoreError as exc:
                log.warning("calls %s: heartbeat failed: %s", self.owner, exc)
            except Exception:  # a bug: logged, the next beat tries again
                log.exception("calls %s: heartbeat raised", self.owner)

    def _renew(self) -> None:
        """Renew the leases of the calls running here (with their heartbeat details) and of
        those waiting to start (`_held`), telling those the store says were stopped or taken
        over to stop, or not to start."""
        with self._lock:
            beats = {k: r.context.details for k, r in self._running.items() if not r.ended}
            beats.update(self._recording)
            beats.update(dict.fromkeys(self._held - beats.keys()))
        if not beats:
            return
        kept = self.runtime.store.heartbeat_calls(
            self.owner, beats, self.runtime.clock.now(), self.lease_ms
        )
        for key in set(beats) - kept:
            with self._lock:
                running = self._running.get(key)
                if running is None and key in self._held:
                    self._lost.add(key)
            if running is not None and not running.ended:
                running.ended = True  # stopped (or taken over): its result will be dropped
                self._cancel(running)
                log.info("call %s (%s): stopped while it ran", key, running.call.call_id)

    def _time_out(self, running: _Running, name: str, message: str) -> None:
        running.ended = True
        self._cancel(running)
        self._finish_error(running.call, name, message, "timed_out")
        self._give_back(running)

    def _cancel(self, running: _Running) -> None:
        running.context.stopped.set()
        task = running.task  # (read once: its end lets go of it on the loop)
        if task is not None:  # (none yet: `_start_tasks` sees the stop)
            task.get_loop().call_soon_threadsafe(task.cancel)

    # -- recording ----------------------------------------------------------------------------
    def _end(self, running: _Running, result: Any, error: BaseException | None) -> None:
        """Record how `running` ended (unless it was stopped: then the store drops it)."""
        running.ended = True
        if isinstance(error, asyncio.CancelledError | KeyboardInterrupt):
            return
        if isinstance(error, BaseException) and not isinstance(error, Exception):
            raise error  # (SystemExit...) ends the executor's thread: its worker exits non-zero
        executed = self.executor.call_ended(running.plan, result, error)
        if executed.poisoned is not None:
            self._poisoned(running, executed.poisoned)
        running.executed = executed
        self._record(running.call, executed, error)

    def _poisoned(self, running: _Running, reason: str) -> None:
        """Report a value the call returned that no store holds (the call fails with a
        `StoreEncodingError`), as the value a step refuses is reported."""
        run, call = running.run, running.call
        state = str(call.payload.get("invoked_by") or run.state)
        self.runtime.telemetry.report(
            RunEvent(
                events.POISONED_VALUE,
                run.id,
                run.workflow_name,
                run.key,
                state,
                f"run {run.id} ({run.workflow_name}, key {run.key}, state {state}): value refused "
                f"(invoke {call.call_id!r}): {reason}",
                traceparent=run.traceparent,
                fields={"reason": reason},
            )
        )

    def _record(self, call: CallRecord, executed: Executed, error: BaseException | None) -> None:
        """Write an executed call's end: a retry after a transient failure, else its result
        event queued for its run."""
        trace = None if error is None else traceback_text(error)
        name = (
            None
            if executed.event is None or "error" not in executed.event
            else str(executed.event["error"].get("name"))
        )
        message = executed.outcome.error
        if executed.transient is not None:
            policy = self.runtime.transient
            if call.attempt < policy.max_attempts:
                wait = policy.wait_ms(call.attempt)
                self._retry(
                    call, CallEnd("retrying", name, message, trace), self.runtime.clock.now() + wait
                )
                log.info(
                    "call %s (%s) of run %s: transient failure (attempt %d): %s: %s; "
                    "retry in %d ms",
                    call.idempotency_key,
                    call.call_id,
                    call.run_id,
                    call.attempt,
                    name,
                    message,
                    wait,
                )
                return
            self.runtime.store.note_call_failures(
                call.idempotency_key, call.attempt, CallEnd("failed", name, message)
            )
        event = executed.event
        if executed.fails_run is not None:  # a result no store can hold: the call failed
            event = {
                "type": error_actor_event_type(call.call_id),
                "error": {"name": "StoreEncodingError", "message": executed.fails_run},
            }
            name, message = "StoreEncodingError", executed.fails_run
        status = (
            "done"
            if executed.outcome.status in ("done", "skipped") and executed.fails_run is None
            else "failed"
        )
        outcome = "done" if status == "done" else "failed"
        if executed.outcome.status == "skipped":  # a dry run: the external call was not made
            outcome, message = "skipped", str(executed.outcome.result)
        self._finish(
            call,
            status,
            event or {"type": error_actor_event_type(call.call_id)},
            CallEnd(outcome, name, message, trace),
        )

    def _finish_error(self, call: CallRecord, name: str, message: str, outcome: str) -> None:
        event = {
            "type": error_actor_event_type(call.call_id),
            "error": {"name": name, "message": message},
        }
        self._finish(call, "failed", event, CallEnd(outcome, name, message))

    def _finish(self, call: CallRecord, status: str, event: dict[str, Any], end: CallEnd) -> None:
        """Record the call's end with its result event, and the run's step that applies it
        when the run is at rest (one transaction: `RunDriver.send`)."""
        self._released()
        finish = CallFinish(call.idempotency_key, self.owner, call.attempt, status, end)
        if self._batch is not None:
            self._batch.append((finish, call.run_id, event))
            return
        self._writes.wait_for(call.run_id)  # (its run's ends that ended before are written)
        queued = self._finish_one(finish, call.run_id, event, self.driver)
        with self._lock:
            self.finished += 1
        if not queued:
            log.info(
                "call %s (%s): ended after it was stopped; its result is dropped",
                call.idempotency_key,
                call.call_id,
            )

    def _finish_one(
        self, finish: CallFinish, run_id: str, event: dict[str, Any], driver: RunDriver
    ) -> int:
        """One call's end with the step of its result (`driver.send`); its inbox id, 0 when
        the result was dropped."""
        try:
            return driver.send(run_id, event, self.runtime.clock.now(), finish=finish)
        except (RunNotFoundError, RunFinishedError):
            return 0

    def _retry(self, call: CallRecord, end: CallEnd, at: int | None = None) -> None:
        self._released()
        when = at if at is not None else self.runtime.clock.now() + self.lease_ms
        self.runtime.store.retry_call(
            call.idempotency_key, self.owner, call.attempt, self.runtime.clock.now(), when, end
        )

    def _with_runs(
        self, calls: Sequence[CallRecord]
    ) -> list[tuple[CallRecord, RunRecord | None, Machine | None]]:
        """Claimed calls with their runs, read together (one read, not one per call), and
        the definitions that step them."""
        if not calls:
            return []
        try:
            runs = self.runtime.store.get_runs([call.run_id for call in calls])
        except StoreError:  # (each call reads its run on its own in `_begin`)
            runs = {}
        ready: list[tuple[CallRecord, RunRecord | None, Machine | None]] = []
        for call in calls:
            run = runs.get(call.run_id)
            ready.append((call, run, None if run is None else self.runtime.machine_for(run)))
        return ready

    def _run_of(self, call: CallRecord) -> RunRecord | None:
        """`call`'s run, None when it no longer exists (a store that does not answer raises:
        the call is started at a later look, not ended as if its run were gone)."""
        try:
            return self.runtime.store.get_run(call.run_id)
        except RunNotFoundError:
            return None

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="calls-loop", daemon=True)
            thread.start()
            self._loop, self._loop_thread = loop, thread
        return self._loop

    def _close(self) -> None:
        self._writes.close()  # (the ends being written are written)
        for running in self._running.values():
            self._cancel(running)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(_wind_down, self._loop)
            if self._loop_thread is not None:
                self._loop_thread.join(timeout=5)
            self._loop = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


WIND_DOWN_S = 2.0
"""How long a stopping executor's loop waits for its cancelled tasks to end."""


def _wind_down(loop: asyncio.AbstractEventLoop) -> None:
    """(on `loop`) Cancel its tasks and stop it once they have ended (at most `WIND_DOWN_S`):
    each call's coroutine then unwinds on the loop, in its own context, rather than being
    closed later by the garbage collector in whatever thread and context that runs."""
    tasks = asyncio.all_tasks(loop)
    if not tasks:
        loop.stop()
        return
    for task in tasks:
        task.cancel()
    loop.call_later(WIND_DOWN_S, loop.stop)
    asyncio.gather(*tasks, return_exceptions=True).add_done_callback(lambda _: loop.stop())


def _run(plan: CallPlan) -> Any:
    """Run `plan` to completion in this thread (a coroutine on a loop of its own), as every
    recorded effect is called (`outbox._call`)."""
    return outbox._call(plan.fn, (plan.argument,), {}, plan.key, plan.outbox_key)


def _in_thread(running: _Running, observed: AbstractContextManager[Outcome]) -> Any:
    """An attempt run in this thread, inside `observed` (`CallExecutor._observed`)."""
    with observed as outcome, running_call(running.context):
        try:
            result = _run(running.plan)
        except Exception as exc:
            outcome("failed", f"{type(exc).__name__}: {exc}")
            raise
        outcome("done", None)
        return result


def _coroutine(
    running: _Running, observed: AbstractContextManager[Outcome]
) -> Coroutine[Any, Any, Any]:
    """What a coroutine call's task runs: the call's own coroutine where nothing observes its
    attempt (no span, no metric: `UNOBSERVED`), so that a waiting call keeps no coroutine,
    frame and arguments of ours beside its own; else `_arun`, around it."""
    if observed is not UNOBSERVED:
        return _arun(running, observed)
    try:
        coroutine: Coroutine[Any, Any, Any] = _called(running.plan)
    except Exception:  # (arguments it does not take: raised again in its task, as its failure)
        return _arun(running, observed)
    return coroutine


def _called(plan: CallPlan) -> Any:
    """The call's function called with its argument, and with its idempotency key where it
    takes one (a coroutine function's: the coroutine)."""
    kwargs = {"idempotency_key": plan.key} if _accepts_key(plan.fn) else {}
    return plan.fn(plan.argument, **kwargs)


async def _arun(running: _Running, observed: AbstractContextManager[Outcome]) -> Any:
    """A coroutine call on the executor's loop, inside `observed` (its task's context holds
    its key and call context: `_start_tasks`)."""
    with observed as outcome:
        try:
            result = _called(running.plan)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            outcome("failed", f"{type(exc).__name__}: {exc}")
            raise
        outcome("done", None)
        return result
