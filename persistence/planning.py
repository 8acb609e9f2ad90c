"""The step planner: one pure function from a run, its pending work and what its effects brought
back to the step to commit, shared by every way a durable step is taken.

A driver holds a run as a `Leased`, made from one of three sources: a claim (`claimed`, the
run and its pending work as the claim read them), a start (`Planner.started`, a run its
starter created already leased, with its first effects) and a read at rest
(`Planner.unleased`, runs read without a lease, the claim folded into the step's commit); its
one entry, `RunDriver.drive`, steps them alike. An event sent to a run at rest, stepped inside
its send's transaction (`RunDriver.send`, a burst of call results in `finish_calls`,
PostgreSQL's step from rest), is read at rest too (`Planner.at_rest`). All plan their step
here (`Planner.plan`); the store writes it under the fence its commit names (leased,
unleased, from rest). Planning reads the runtime (`host.Host`: definitions, settings, the
clock, the rows kept of runs at rest, whether the call executor has room) and writes nothing:
no store call, no telemetry, no change to the driver. A send's planner (`SendPlanner`) is
handed to the store as data (`stores.planners.StepPlanner`), which calls it with the run it
read under its lock and returns the plan it wrote; that call is the planner only, never the
driver: the driver reports and follows the step after the store returned. What is not pure
stays in the driver: executing effects, what a claim's intake does to a run it cannot step
(fails it, releases it, takes its limited workflow's place), releasing a run whose step
changed nothing (`Unchanged`), the error workflow a failing step starts (its start is traced).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from persistence.children import ChildWork, child_run_ids, child_work, ended_delivery
from persistence.columns import run_columns, state_text
from persistence.host import Host
from persistence.outbox import Executed, to_outbox, traceback_text
from persistence.search import changed as search_changes
from persistence.stores import (
    ACTIVE,
    CallRecord,
    InboxEvent,
    JournalEntry,
    NewEffect,
    PendingWork,
    RunRecord,
    StepCommit,
)
from persistence.stores.rules import CANCEL_EVENT, idempotency_key, is_call, leasable_calls
from statecharts import Machine, Snapshot
from statecharts.effects import Effect, StopChild
from statecharts.errors import ContextError
from statecharts.events import done_actor_event_type, error_actor_event_type


@dataclass(slots=True)
class Step:
    """What one step changes, built up before the commit."""

    snapshot: Snapshot
    outcomes: list[Any] = field(default_factory=list)
    journal: list[JournalEntry] = field(default_factory=list)
    new_effects: list[NewEffect] = field(default_factory=list)
    logged: list[Effect] = field(default_factory=list)
    consumed: list[int] = field(default_factory=list)
    status: str | None = None
    error: str | None = None
    poisoned: str | None = None  # a value no store holds exactly, refused where it entered
    traceback: str | None = None  # where the code that failed the run raised

    def apply(
        self,
        machine: Machine,
        event: dict[str, Any],
        now: int,
        timer_id: str | None = None,
        inbox_id: int | None = None,
    ) -> None:
        """Apply one event (or fire one timer); a raising guard or action fails the run.
        `inbox_id`: the inbox row the event came from, journaled with it (a waiting sender
        finds its step by it)."""
        before = state_text(self.snapshot)
        try:
            if timer_id is None:
                after, effects = machine.transition(self.snapshot, event, now)
            else:
                after, effects = machine.fire_timer(self.snapshot, timer_id, now)
        except Exception as exc:
            self.status, self.error = "error", f"event {event.get('type')!r}: {exc}"
            if isinstance(exc, ContextError):
                self.poisoned = str(exc)
            self.traceback = traceback_text(exc)  # where a guard or action raised (on call)
            self.journal.append(JournalEntry(event, before, before, inbox_id))
            return
        self.snapshot = after
        self.new_effects.extend(to_outbox(effects, len(self.new_effects)))
        self.logged.extend(effects)
        self.journal.append(JournalEntry(event, before, state_text(after), inbox_id))

    @property
    def changed(self) -> bool:
        return bool(self.outcomes or self.journal or self.status)

    @property
    def in_step(self) -> list[NewEffect]:
        """The new effects its run executes itself, next (not its calls, which run beside)."""
        return [e for e in self.new_effects if not is_call(e)]

    def stopped_calls(self, before: Snapshot, status: str) -> list[str]:
        """The invoke ids whose calls this step stops: the children it stopped, and when it
        ends the run, every child the run had; not those whose result it applied (their
        calls have ended: nothing to stop)."""
        stopped = {e.id for e in self.logged if isinstance(e, StopChild)}
        if status != ACTIVE:
            stopped |= set(before.children)
        answered = {str(j.event.get("type")) for j in self.journal}
        return sorted(
            i
            for i in stopped
            if done_actor_event_type(i) not in answered
            and error_actor_event_type(i) not in answered
        )


@dataclass(slots=True)
class Leased:
    """A run a driver holds (leased, or read at rest for a step with no claim), between two of
    its steps."""

    run: RunRecord
    machine: Machine
    snapshot: Snapshot
    pending: list[tuple[str, str, Any]]  # (idempotency key, kind, payload) to execute next
    inbox: list[InboxEvent]
    inbox_checked: float
    version: int
    status: str
    steps: int = 0
    attempt: int = 0
    released: tuple[str, Snapshot] | None = None  # (status, snapshot) its last commit left
    unleased: bool = False  # read without a lease: its next commit checks that none is held


@dataclass(frozen=True, slots=True)
class Taken:
    """The runs a driver is to step (`RunDriver.drive`), however it came to hold them, with what
    taking them already did: `steps` committed (a claimed row that does not parse or restore,
    failed), `left` (a run read at rest that does not qualify, left to a claim), `placed` (a
    claim's runs took their limited workflows' places: given back when the drive ends)."""

    leased: list[Leased]
    steps: int = 0
    left: bool = False
    placed: bool = False


def claimed(run: RunRecord, machine: Machine, snapshot: Snapshot, work: PendingWork) -> Leased:
    """`run`, leased by a claim, restored to `snapshot`, with its pending work as the claim read
    it: its effects to execute, its queued events."""
    pending = [(e.idempotency_key, e.kind, e.payload) for e in work.effects]
    return _leased(run, machine, snapshot, pending, work.inbox)


def _leased(
    run: RunRecord,
    machine: Machine,
    snapshot: Snapshot,
    pending: list[tuple[str, str, Any]],
    inbox: list[InboxEvent],
    unleased: bool = False,
) -> Leased:
    """`run` held at its row's version and status, before its first step here."""
    return Leased(
        run,
        machine,
        snapshot,
        pending,
        inbox,
        time.monotonic(),
        run.version,
        run.status,
        attempt=run.attempt_count,
        unleased=unleased,
    )


class CallTaker(Protocol):
    """A call executor that takes the calls a driver's steps record (`persistence.calls`):
    leased to it in the step's own commit, run by it next, with no claim."""

    def lease(self, count: int) -> tuple[str, int] | None:
        """(owner, lease until) for `count` more calls, or None when it has no room."""
        ...

    def adopt(self, calls: Sequence[CallRecord], run: RunRecord, machine: Machine) -> None:
        """Run these calls of `run` (of `machine`), leased to it by a committed step."""
        ...


class Plan(msgspec.Struct, frozen=True):
    """A planned step of `leased`: what it changes (`step`) and the commit that writes it,
    planned at `now` (the store's clock); `began` (`time.perf_counter()`) when planning began,
    the start of its step in telemetry."""

    leased: Leased
    step: Step
    commit: StepCommit
    now: int
    began: float


@dataclass(frozen=True, slots=True)
class Unchanged:
    """A step that changed nothing: the run is released (unless read at rest), due at
    `wake_at`."""

    wake_at: int | None


class Planner:
    """Plans the steps of the runs a driver of `owner` holds (see the module's docstring)."""

    def __init__(
        self,
        host: Host,
        owner: str,
        lease_ms: int,
        max_steps: int = 1000,
        calls: CallTaker | None = None,
    ) -> None:
        self.host = host
        self.owner = owner
        self.lease_ms = lease_ms
        self.max_steps = max_steps
        self.calls = calls

    def at_rest(self, run: RunRecord, work: PendingWork) -> Leased | None:
        """`run`, read without a lease, ready for a step with no claim; None unless its step
        runs nothing first: active, unleased (an expired lease is a takeover: a claim's), no
        pending effects, no limited workflow, a row that parses and restores with a
        definition here (a broken one is failed by a claim, under a lease)."""
        host = self.host
        machine = host.machine_for(run)
        if (
            machine is None
            or run.problem is not None
            or work.problem is not None
            or run.lease_owner is not None
            or run.status != ACTIVE
            or work.effects
            or host.load.workflow_limits.get(run.workflow_name)
        ):
            return None
        snapshot = host.resting.restored(run)  # (kept by the step that left it at rest)
        if snapshot is None:
            try:
                snapshot = machine.restore(run.snapshot)
            except Exception:
                return None
        return _leased(run, machine, snapshot, [], work.inbox, unleased=True)

    def unleased(self, found: Sequence[tuple[RunRecord, PendingWork]]) -> Taken:
        """Runs read without a lease (`RunStore.read_work`), each with its pending work, to be
        stepped as a claim would step them but with the claim folded into the step's commit
        (`at_rest`: only a run whose step runs nothing first); `left` when one does not
        qualify (a claim takes it)."""
        leased = [x for run, work in found if (x := self.at_rest(run, work)) is not None]
        return Taken(leased, left=len(leased) < len(found))

    def started(
        self, run: RunRecord, effects: Sequence[NewEffect], snapshot: Snapshot | None = None
    ) -> Taken:
        """`run`, which its starter created already leased to this planner's owner
        (`NewRun.lease_owner`), with its first `effects` (the ones it executes itself: its
        calls run beside it) and `snapshot`, what its row restores to (kept in memory as
        between steps; else restored from the row): no claim, no read of its pending work."""
        machine = self.host.machine_for(run)
        if machine is None:  # started with a definition this runtime has: cannot happen
            raise LookupError(f"run {run.id}: no definition for version {run.workflow_version}")
        pending = [
            (idempotency_key(run.id, 1, e.index), e.kind, e.payload)
            for e in effects
            if not is_call(e)
        ]
        first = machine.restore(run.snapshot) if snapshot is None else snapshot
        return Taken([_leased(run, machine, first, pending, [])])

    def plan(
        self, x: Leased, executed: list[Executed], should_stop: Callable[[], bool]
    ) -> Plan | Unchanged:
        """The step of `x` that applies what its executed effects brought back, its due timers
        and its queued events: the commit to write, or `Unchanged`. Without the error workflow
        a failing step starts (`RunDriver` adds it: its start is traced)."""
        began = time.perf_counter()
        host = self.host
        now, machine = host.clock.now(), x.machine
        step = Step(x.snapshot)
        if x.status == ACTIVE:
            self._apply(machine, step, executed, x.inbox, now)
        else:  # an ended run finishing its last effects: record them, move nothing
            step.outcomes = [e.outcome for e in executed]
            failure = next((e for e in executed if e.fails_run), None)
            if failure is not None:
                step.status, step.error, step.traceback = (
                    "error",
                    failure.fails_run,
                    failure.traceback,
                )
        if not step.changed:
            return Unchanged(run_columns(step.snapshot, pending_effects=False, now=now).wake_at)
        in_step = step.in_step
        row = run_columns(
            step.snapshot,
            pending_effects=bool(in_step),
            now=now,
            status=step.status,
            failure=step.error,
        )
        work = self._child_work(x, step, row.status, row.last_error)
        due = step.snapshot.next_due()
        more_now = row.status == ACTIVE and due is not None and due <= now
        release = should_stop() or x.steps + 1 >= self.max_steps or not (in_step or more_now)
        commit = StepCommit(
            run_id=x.run.id,
            owner=self.owner,
            expected_version=x.version,
            state=row.state,
            snapshot=machine.persist(step.snapshot),
            status=row.status,
            release=release,
            wake_at=row.wake_at,
            attempt_count=row.attempt_count,
            last_error=row.last_error,
            error_traceback=step.traceback if row.status == "error" else None,
            workflow_version=machine.fingerprint,
            lease_until=now + self.lease_ms,
            new_effects=step.new_effects,
            effect_outcomes=step.outcomes,
            consumed_inbox=step.consumed,
            journal=step.journal if host.journal else (),
            start_runs=host.child_runs(x.run.id, x.run.key, work.starts, now, x.run.traceparent),
            stop_children=work.stops,
            deliveries=work.deliveries,
            unleased=x.unleased,
            stop_calls=step.stopped_calls(x.snapshot, row.status),
            call_lease=self._call_lease(step.new_effects),
            search=search_changes(
                host.search_fields.get(x.run.workflow_name, ()),
                x.snapshot.context,
                step.snapshot.context,
            ),
        )
        return Plan(x, step, commit, now, began)

    def _call_lease(self, effects: Sequence[NewEffect]) -> tuple[str, int] | None:
        """The lease of the calls among a step's new `effects` to the driver's executor; none
        when the step also records effects its run executes itself: those run first (the
        calls are claimed once they are done, `Store.claim_calls`)."""
        count = leasable_calls(effects)
        return None if count == 0 or self.calls is None else self.calls.lease(count)

    def _child_work(self, x: Leased, step: Step, status: str, failure: str | None) -> ChildWork:
        """What this step of `x` does to its child runs and its parent (`persistence.children`):
        the children it starts and stops, the events it sends them, and, when it ends a child
        run, the event that tells the parent."""
        stopping = status != ACTIVE or any(isinstance(e, StopChild) for e in step.logged)
        existing = (
            child_run_ids(x.machine, x.snapshot) if stopping and x.snapshot.children else set()
        )
        work = child_work(x.run.parent_run_id, step.logged, existing, status)
        if x.status == ACTIVE:
            ended = ended_delivery(
                x.run.parent_run_id, x.run.parent_invoke_id, status, step.snapshot, failure
            )
            if ended is not None:
                work.deliveries.append(ended)
        return work

    def _apply(
        self,
        machine: Machine,
        step: Step,
        executed: list[Executed],
        inbox: list[InboxEvent],
        now: int,
    ) -> None:
        """Outcomes and their events first, then due timers and inbox events in the order they
        happened: a timer due before an event arrived fires first, an event that arrived
        before a timer was due is applied first (as in memory), however late the step runs."""
        step.outcomes = [x.outcome for x in executed]
        failing = next((x for x in executed if x.fails_run), None)
        if failing is not None:
            step.status, step.error, step.poisoned, step.traceback = (
                "error",
                failing.fails_run,
                failing.poisoned,
                failing.traceback,
            )
            return
        cancel = next((e for e in inbox if e.event.get("type") == CANCEL_EVENT), None)
        if cancel is not None:  # the other queued events become dead letters (run cancelled)
            step.consumed = [cancel.id]
            _cancel(machine, step, cancel)
            return
        for x in executed:
            if x.event is not None and step.status is None:
                step.apply(machine, x.event, now)
        for item in inbox:  # events left when the run ends become dead letters (the store)
            _fire_timers(machine, step, min(item.created_at, now), now)
            if step.status is not None or step.snapshot.status != "active":
                break
            step.consumed.append(item.id)
            # (an event sent from rest has no inbox row yet: id 0, journaled without one)
            step.apply(machine, item.event, now, inbox_id=item.id or None)
        _fire_timers(machine, step, now, now)


class SendPlanner:
    """The planner of a sent event's step, handed to the store (`Store.send_and_step`): the
    step a worker would take for the event with no claim, planned from the run as the store
    read it; None to leave the event queued: the run is not at rest (`Planner.at_rest`), an
    earlier event waits, planning raised, or the step would fail the run (a worker fails it
    under a lease). It releases the run: workers run the effects it records."""

    def __init__(self, planner: Planner) -> None:
        self.planner = planner

    def plan(self, run: RunRecord, work: PendingWork) -> Plan | None:
        """The step of the sent event (the last of `work.inbox`), or None."""
        x = self.planner.at_rest(run, work) if len(work.inbox) == 1 else None
        if x is None:
            return None
        try:
            plan = self.planner.plan(x, [], lambda: True)
        except Exception:  # (a bug, or a value that cannot be staged): a worker takes it
            return None
        if isinstance(plan, Unchanged) or plan.commit.status == "error":
            return None
        return plan


def _fire_timers(machine: Machine, step: Step, until: int, now: int) -> None:
    """Fire the step's timers due at or before `until`, in due order (at `now`)."""
    while step.snapshot.timers and step.status is None and step.snapshot.status == "active":
        timer = min(
            (t for t in step.snapshot.timers if t.due_at <= until),
            key=lambda t: t.due_at,
            default=None,
        )
        if timer is None:
            return
        step.apply(machine, {"type": timer.event["type"], "timer": timer.id}, now, timer.id)


def _cancel(machine: Machine, step: Step, request: InboxEvent) -> None:
    before = state_text(step.snapshot)
    if step.snapshot.status == "active":
        step.snapshot, effects = machine.stop(step.snapshot)
        step.logged.extend(effects)
    step.status = "cancelled"
    reason = request.event.get("reason")
    step.error = str(reason) if reason is not None else None
    step.journal.append(JournalEntry(request.event, before, state_text(step.snapshot), request.id))
