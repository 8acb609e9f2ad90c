"""Driving leased runs: execute their pending effects, apply what came back, commit, repeat.

Each round steps every run the thread holds once (one version of each run). First the runs'
pending effects execute, the runs at once on a small thread pool and each run's own effects in
order. Then, run by run, the outcomes, the events they sent back, due timers and queued inbox
events are applied to the snapshot in that order. Last, the new snapshots, new effects,
outcomes, consumed inbox rows and journal rows of all those runs are committed in one
transaction, each run's step only under its own lease and version. Effects execute only after
the commit that recorded them. The lease is kept while effects are pending, so the common chain
"effect, result, next effect" costs one round per step, and a round one commit however many
runs it steps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from msgspec.structs import replace

from persistence.columns import state_text
from persistence.effect_rounds import EffectRounds
from persistence.failures import Failures
from persistence.host import Host
from persistence.outbox import Executed, log_effects, traceback_text
from persistence.planning import (
    CallTaker,
    Leased,
    Plan,
    Planner,
    SendPlanner,
    Step,
    Taken,
    Unchanged,
    claimed,
)
from persistence.stores import (
    ACTIVE,
    CallFinish,
    CallRecord,
    ConflictError,
    Grant,
    NewEffect,
    PendingWork,
    RunFinishedError,
    RunNotFoundError,
    RunRecord,
    StepCommit,
    StoreError,
    StoreUnavailableError,
)
from persistence.stores.errors import StoreEncodingError
from persistence.stores.planners import LEAVE_QUEUED
from persistence.stores.rules import (
    idempotency_key,
    is_call,
)
from persistence.telemetry import events
from statecharts import Snapshot

log = logging.getLogger("statecharts.runs")

INBOX_RECHECK_S = 1.0
"""While a worker keeps a run, it looks for newly sent events at most this often."""


@dataclass(frozen=True, slots=True)
class Drove:
    """What `RunDriver.drive` did: the `steps` it committed (with those of runs failed while
    taken), the (status, snapshot) its last commit left a single run released in (None: it
    left otherwise, failed outside a step, lost its lease or was released unchanged: its row
    tells; or the drive held several runs), and whether a run read at rest was left to a claim
    (it did not qualify, another worker won it, or stepping it raised)."""

    steps: int
    released: tuple[str, Snapshot] | None = None
    left_to_claim: bool = False


class RunDriver:
    """Steps runs leased by `owner` until they wait, end, or the worker stops."""

    def __init__(
        self,
        runtime: Host,
        owner: str,
        lease_ms: int,
        max_steps: int = 1000,
        parallel: int = 1,
        holds: Callable[[set[str], bool], None] | None = None,
        calls: CallTaker | None = None,
    ) -> None:
        self.runtime = runtime
        self.calls = calls
        """The call executor that takes the calls its steps record (leased to it in the step's
        commit); without one they wait for any worker's executor to claim them."""
        self.holds = holds
        """Told the ids of runs this driver lets go of (False: released, ended, or waiting for
        their limit), so that its worker's heartbeat stops renewing their leases."""
        self.owner = owner
        self.lease_ms = lease_ms
        self.max_steps = max_steps
        self.parallel = parallel
        self.telemetry = runtime.telemetry
        self.failures = Failures(runtime, owner)
        """Fails and releases runs that cannot go on, and reports what happened to them."""
        self.effects = EffectRounds(runtime, owner, lease_ms, parallel, holds, self.failures)
        """Executes a round's effects; a limited workflow's runs under their places."""
        self.planner = Planner(runtime, owner, lease_ms, max_steps, calls)
        """Plans every step this driver takes (`persistence.planning`)."""
        self._send_planner = SendPlanner(self.planner)
        self._left_to_claim = False  # an unleased run of this drive was left to a claim
        self.last_step: tuple[str, str, Snapshot] | None = None
        """(run id, status, snapshot) of the last step this driver committed."""
        self.committed = 0
        """How many steps this driver committed (all its paths)."""
        self.sent_step: tuple[int, int, str] | None = None
        """(inbox id, version, state) of the last event `send` applied in its own step."""
        self.unleased_calls: set[str] | None = None
        """When a set (`Inline` asks for it): the runs whose steps committed here recorded
        calls its executor did not take (their actions run first), to claim once those ran."""

    def close(self) -> None:
        """Stop the threads that run a round's effects (if any were started)."""
        self.effects.close()

    def drive(self, taken: Taken, should_stop: Callable[[], bool]) -> Drove:
        """Step the `taken` runs (a claim's: `claimed`; a start's: `Planner.started`; read at
        rest: `Planner.unleased`) in rounds until each waits, ends or the worker stops. A
        round executes every run's pending effects and commits all their steps in one
        transaction (one commit to disk for the batch), each under its run's fence: its lease,
        or for a run read at rest, nobody's lease (the claim folded into the commit, which
        takes the lease only when the step leaves effects to run). Every lease is released (or
        lost to a `ConflictError`, logged) when this returns. Anything that goes wrong with
        one run (an exception, a value the store refuses) fails or releases that run only (a
        run read at rest is left to a claim, which fails it under its lease); its batch-mates
        still commit. Only a store outage (`StoreUnavailableError`) leaves this method."""
        self._left_to_claim = False
        try:
            steps = taken.steps + self._rounds(taken.leased, should_stop)
        finally:  # a limited workflow's runs give their places back (their leases ended)
            if taken.placed:
                self.effects.leave_workflows([x.run for x in taken.leased])
            if self.holds is not None:
                self.holds({x.run.id for x in taken.leased}, False)
        only = taken.leased[0].released if len(taken.leased) == 1 else None
        return Drove(steps, only, taken.left or self._left_to_claim)

    def send(
        self,
        run_id: str,
        event: dict[str, Any],
        now: int,
        traceparent: str | None = None,
        finish: CallFinish | None = None,
    ) -> int:
        """Queue `event` for run `run_id` and apply it in the same transaction when the run
        is at rest (`Store.send_and_step`, handed this driver's `SendPlanner`): the step a
        worker would take for it with no claim (`Planner.unleased`), written by the same commit,
        counted and traced as a worker's step once the store has returned. If the step leaves
        effects to run, it releases the run due now and workers are woken to claim it. The
        event stays queued for a worker, exactly as a plain `send_event` leaves it, when the
        run is not at rest, when an earlier event is still queued, when its step would fail
        the run (a worker fails it under a lease), and when the store refuses the step. A run
        this process left at rest (`Runtime.resting`) is stepped from its row as committed
        here, unread, if the store can (`Store.send_and_step`'s `rest`). Returns the inbox id.
        With `finish`, `event` is that call's result, recorded with the call's end
        (`persistence.calls`); 0 when the call was no longer its holder's (stopped, taken
        over): nothing was queued."""
        store, cancelled, resting = self.runtime.store, list[str](), self.runtime.resting
        try:
            sent = store.send_and_step(
                run_id,
                event,
                now,
                self._send_planner,
                traceparent=traceparent,
                cancelled=cancelled,
                rest=resting.get(run_id),
                finish=finish,
            )
        except Exception as exc:
            if isinstance(exc, (RunNotFoundError, RunFinishedError)):
                resting.drop(run_id)  # (not followed: no step of it can come any more)
            else:
                resting.moved(run_id)
            if isinstance(exc, (StoreUnavailableError, RunNotFoundError, RunFinishedError)):
                raise
            # the store refused the step: nothing was written, queue the event
            log.warning(
                "run %s: the step of a sent %r was refused in the send (%s: %s); "
                "queued for a worker",
                run_id,
                event.get("type"),
                type(exc).__name__,
                exc,
            )
            if finish is not None:
                return store.send_and_step(
                    run_id, event, now, LEAVE_QUEUED, traceparent=traceparent, finish=finish
                ).inbox_id
            return store.send_event(run_id, event, now, traceparent=traceparent)
        self.telemetry.runs_cancelled(cancelled)
        if sent.version is None:  # queued for a worker
            resting.moved(run_id)
        elif sent.plan is not None:
            self._sent_committed(sent.plan, sent.version)
            self.sent_step = (sent.inbox_id, sent.version, sent.plan.commit.state)
        return sent.inbox_id

    def finish_calls(
        self,
        ends: Sequence[tuple[CallFinish, str, dict[str, Any]]],
        now: int,
        read: Mapping[str, RunRecord] | None = None,
    ) -> list[int]:
        """`send` with its `finish` for each of a burst of call ends (at most one per run), all
        written in one transaction (`Store.finish_calls`): each run at rest stepped by it, as
        `send` steps one; the inbox ids (0: a result dropped). Each run's step is first tried
        from its row as this process left it at rest (`Runtime.resting`) or, when it follows
        no such row (a run started by another process, or one of more runs than it follows),
        as `read` holds it (the executor read it when it took the call), the later of the two
        if both: a guess the store checks either way (a stale one costs the locked read,
        never a wrong write)."""
        cancelled: list[str] = []
        resting, read = self.runtime.resting, read or {}
        rests: dict[str, RunRecord] = {}
        for _, run_id, _ in ends:
            known = [r for r in (resting.get(run_id), read.get(run_id)) if r is not None]
            if known:
                rests[run_id] = max(known, key=lambda r: r.version)
        sent = self.runtime.store.finish_calls(ends, now, self._send_planner, cancelled, rests)
        self.telemetry.runs_cancelled(cancelled)
        for (_, run_id, _), one in zip(ends, sent, strict=True):
            if one.version is None:
                resting.moved(run_id)
            elif one.plan is not None:
                self._sent_committed(one.plan, one.version)
        return [one.inbox_id for one in sent]

    def _sent_committed(self, plan: Plan, version: int) -> None:
        """A sent event's step that the store wrote at `version`: traced as a worker's step
        from when it was planned, then followed as a round follows its committed steps."""
        x = plan.leased
        self.telemetry.begin_step(
            x.run, state_text(x.snapshot), True, 1, x.attempt, x.inbox, began=plan.began
        )
        self._committed(x, plan.step, plan.commit, version, sent=True)

    def _rounds(
        self,
        leased: list[Leased],
        should_stop: Callable[[], bool],
    ) -> int:
        """Step the `leased` runs round by round until none is left; the steps committed."""
        steps = 0
        while leased:
            this_round, leased, ended = leased, [], set()
            for x in this_round:
                self.telemetry.begin_step(
                    x.run, state_text(x.snapshot), x.steps == 0, len(this_round), x.attempt, x.inbox
                )
            try:
                executed = self.effects.execute_round(this_round)
                staged = []
                for x, done in zip(this_round, executed, strict=True):
                    found = self._stage_safely(x, done, should_stop)
                    if found is not None:
                        staged.append(found)
                versions = self._commit(staged) if staged else []
                for (x, step, commit), version in zip(staged, versions, strict=True):
                    if version is None:
                        continue
                    steps += 1
                    self._committed(x, step, commit, version)
                    ended.add(x.run.id)
                    if commit.release:
                        x.released = (commit.status, step.snapshot)
                    else:
                        self._advance(x, step, commit, version)
                        leased.append(x)
            finally:  # every step span ends, committed or not (an outage leaves this method)
                for x in this_round:
                    if x.run.id not in ended:
                        self.telemetry.end_step(x.run, x.status, None, None)
            if self.holds is not None:
                gone = {x.run.id for x in this_round} - {x.run.id for x in leased}
                if gone:
                    self.holds(gone, False)
        return steps

    def _committed(
        self, x: Leased, step: Step, commit: StepCommit, version: int, *, sent: bool = False
    ) -> None:
        """What follows a committed step of `x`: its log lines, its end in telemetry, and
        whether it left the run at rest (`Runtime.resting`, which follows a `sent` step's run)."""
        x.unleased = False  # released, or leased by this commit
        if (
            self.unleased_calls is not None
            and commit.call_lease is None
            and any(is_call(e) for e in commit.new_effects)
        ):
            self.unleased_calls.add(x.run.id)
        if commit.call_lease is not None and self.calls is not None:
            self.calls.adopt(
                leased_calls(x.run.id, version, commit.new_effects, commit.call_lease),
                x.run,
                x.machine,
            )
        if commit.stop_calls:
            self._calls_stopped(x, commit.stop_calls)
        self.last_step = (x.run.id, commit.status, step.snapshot)
        self.committed += 1
        self.runtime.resting.committed(
            x.run, commit, version, self.runtime.clock.now(), sent=sent, snapshot=step.snapshot
        )
        log_effects(step.logged, x.run.id)
        self.failures.report_step(x, step, commit)
        if commit.attempt_count is not None:
            x.attempt = commit.attempt_count
        if commit.status != ACTIVE:
            self.failures.report_dead_letters(x, commit)
        self.telemetry.end_step(x.run, x.status, commit, version)

    def _calls_stopped(self, x: Leased, invoke_ids: Sequence[str]) -> None:
        """A committed step of `x` stopped these calls: a slot reserved for one of them goes
        to the next in its queue now (`LoadControl.calls_stopped`). The step is written
        whatever happens here: a store that fails now leaves the slot to the workers' sweep."""
        try:
            self.runtime.load.calls_stopped(
                x.machine, x.run, invoke_ids, self.runtime.clock.now(), self.lease_ms
            )
        except StoreError as exc:
            log.warning(
                "run %s: the slots of its stopped calls were left to the sweep (%s: %s)",
                x.run.id,
                type(exc).__name__,
                exc,
            )

    def _lost(self, x: Leased) -> None:
        """`x`'s step was not written: its version or lease moved."""
        if x.unleased:  # another worker stepped or claimed it first: a race, not a fault
            self._left_to_claim = True  # (what came meanwhile, e.g. an event, is a claim's)
            log.debug(
                "run %s: stepped or claimed by another worker before this unleased "
                "step of version %d committed; nothing written",
                x.run.id,
                x.version,
            )
            return
        self.failures.lease_lost(x)

    def _stage_safely(
        self, x: Leased, done: list[Executed] | Exception | Grant, should_stop: Callable[[], bool]
    ) -> tuple[Leased, Step, StepCommit] | None:
        """`_stage`, except that a transient failure releases the run with its backoff and any
        exception fails the run (never the thread, never its batch-mates); a run whose call
        in its step was refused its place was released by the store to wait for it."""
        if isinstance(done, Grant):
            self.effects.waiting(x.run, done)
            return None
        if isinstance(done, StoreUnavailableError):  # (an effect reaching the store): an outage,
            raise done  # not this run's fault: the drive backs off, the lease runs out
        if isinstance(done, Exception) and x.unleased:
            self._left_to_claim = True  # not ours to fail: a claim fails it under its lease
            return None
        if isinstance(done, Exception):
            self.failures.fail(
                x,
                f"executing its effects raised {type(done).__name__}: {done}",
                [],
                error_traceback=traceback_text(done),
            )
            return None
        transient = next((d for d in done if d.transient is not None), None)
        if transient is not None:
            self.failures.back_off(x, transient)
            return None
        try:
            return self._stage(x, done, should_stop)
        except StoreUnavailableError:
            raise
        except Exception as exc:
            self._fail_held(
                x,
                f"stepping raised {type(exc).__name__}: {exc}",
                done,
                error_traceback=traceback_text(exc),
            )
            return None

    def _commit(self, staged: list[tuple[Leased, Step, StepCommit]]) -> list[int | None]:
        """Commit the round in one transaction; if the store refuses it for a reason other
        than an outage (a value it cannot hold), commit step by step so that only the
        offending runs fail."""
        store, now = self.runtime.store, self.runtime.clock.now()
        cancelled: list[str] = []  # descendants the steps cancelled, counted as finished
        try:
            versions = store.commit_steps([c for _, _, c in staged], now, cancelled=cancelled)
        except StoreUnavailableError:
            raise
        except Exception:
            if len(staged) == 1:
                versions = [self._commit_alone(*staged[0])]
            else:
                versions = [self._commit_alone(*one) for one in staged]
        else:
            self.telemetry.runs_cancelled(cancelled)
            for (x, _, _), version in zip(staged, versions, strict=True):
                if version is None:
                    self._lost(x)
        return versions

    def _commit_alone(self, x: Leased, step: Step, commit: StepCommit) -> int | None:
        store, now = self.runtime.store, self.runtime.clock.now()
        cancelled: list[str] = []
        try:
            (version,) = store.commit_steps([commit], now, cancelled=cancelled)
        except StoreUnavailableError:
            raise
        except ConflictError:  # another writer won (a duplicate record): not this run's fault
            self._lost(x)
            return None
        except Exception as exc:
            self._fail_held(
                x,
                f"the store refused its step: {exc}",
                None,
                step.outcomes,
                poisoned=str(exc) if isinstance(exc, StoreEncodingError) else None,
            )
            return None
        self.telemetry.runs_cancelled(cancelled)
        if version is None:
            self._lost(x)
        return version

    def _fail_held(self, x: Leased, *args: Any, **kwargs: Any) -> None:
        """Fail `x` (`Failures.fail`) when this driver holds it; a run it stepped unleased is
        not its to fail: the claim that next takes it fails it under its lease."""
        if x.unleased:
            self._left_to_claim = True
            return
        self.failures.fail(x, *args, **kwargs)

    def claimed(
        self, runs: Sequence[RunRecord], work: Mapping[str, PendingWork] | None = None
    ) -> Taken:
        """The runs a claim leased to this driver's owner, to `drive`, with their pending work
        (`work`, as the claim read it: `RunStore.claim_work`; read here when not given). A
        takeover is reported; a run whose definition vanished is released, one whose row
        does not parse or restore is failed (a step, counted), a limited workflow's run takes
        its place (or is released to wait for it)."""
        store, now = self.runtime.store, self.runtime.clock.now()
        if work is None:
            work = store.pending_work([run.id for run in runs]) if runs else {}
        leased, failed = list[Leased](), 0
        for run in runs:
            if run.previous_owner is not None and run.previous_owner != self.owner:
                self.failures.report(
                    events.TAKEOVER,
                    run,
                    run.state,
                    f"run {run.id} ({run.workflow_name}, key {run.key}, state "
                    f"{run.state}): lease of {run.previous_owner} expired; taken over "
                    f"by {self.owner}",
                    previous_owner=run.previous_owner,
                    owner=self.owner,
                )
            problem = run.problem or work[run.id].problem  # (a payload whose key is missing)
            if problem is not None:  # a row that does not parse: failed, never stepped
                failed += self.failures.fail_unreadable(run, problem, now)
                continue
            machine = self.runtime.machine_for(run)
            if machine is None:  # its version vanished from our set between claim and now
                store.release(run.id, self.owner, now + self.lease_ms)
                continue
            try:
                snapshot = machine.restore(run.snapshot)
            except Exception as exc:
                failed += self.failures.fail_unreadable(
                    run, f"snapshot does not restore: {exc}", now
                )
                continue
            if run.terminal and not work[run.id].effects:  # nothing left to do: never again
                store.release(run.id, self.owner, None)
                continue
            if not self.effects.enter_workflow(run, now):
                continue
            leased.append(claimed(run, machine, snapshot, work[run.id]))
        return Taken(leased, failed, placed=True)

    def _stage(
        self, x: Leased, executed: list[Executed], should_stop: Callable[[], bool]
    ) -> tuple[Leased, Step, StepCommit] | None:
        """The step `x` takes after its executed effects (`Planner.plan`), with the error
        workflow it starts if it fails the run; None (the lease released) when nothing
        changed."""
        planned = self.planner.plan(x, executed, should_stop)
        if isinstance(planned, Unchanged):
            if not x.unleased:  # (an unleased run has nothing to give back)
                self.runtime.store.release(x.run.id, self.owner, planned.wake_at)
            return None
        commit = planned.commit
        errors = self.failures.error_runs(
            x.run, x.status, commit.status, commit.state, commit.last_error, planned.now
        )
        if errors:
            commit = replace(commit, start_runs=[*errors, *commit.start_runs])
        return x, planned.step, commit

    def _advance(self, x: Leased, step: Step, commit: StepCommit, version: int) -> None:
        """`x` after its step committed at `version`: the effects it recorded are next."""
        x.snapshot, x.version, x.status, x.steps = (
            step.snapshot,
            version,
            commit.status,
            x.steps + 1,
        )
        x.pending = [
            (idempotency_key(x.run.id, version, e.index), e.kind, e.payload) for e in step.in_step
        ]
        x.inbox = []
        if time.monotonic() - x.inbox_checked > INBOX_RECHECK_S:
            x.inbox, x.inbox_checked = self.runtime.store.pending_events(x.run.id), time.monotonic()


def leased_calls(
    run_id: str, version: int, effects: Sequence[NewEffect], lease: tuple[str, int] | None
) -> list[CallRecord]:
    """The calls a committed step (at `version`) recorded leased to an executor
    (`StepCommit.call_lease`), as the store holds them: running, first attempt open."""
    if lease is None:
        return []
    owner, until = lease
    return [
        CallRecord(
            idempotency_key(run_id, version, e.index),
            run_id,
            version,
            str(e.payload.get("id")),
            dict(e.payload),
            "running",
            1,
            owner,
            until,
            until,
            None,
            None,
            until,
            until,
        )
        for e in effects
        if is_call(e)
    ]
