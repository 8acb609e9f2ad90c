"""The store's side of a step decided inside a send (`RunStore.send_and_step`, `finish_calls`).

A sent event's step must be computed from the run's row as the send's transaction reads it
under its lock, so the store cannot be handed a finished `StepCommit`. It is handed a
`StepPlanner` instead: a pure object that maps the run and its pending work to the step to
commit (a `Planned`, carrying its `StepCommit`), or to None to leave the event queued. It
writes nothing, reports nothing and holds no reference to its caller's state, so the store may
call it again (a transaction run again after a deadlock, a step from rest that was not written)
and drop what it returned; the store only reads `plan.commit`, writes it under its fence, and
returns the plan it wrote (`Sent.plan`). Whatever follows a committed step (telemetry, the
caller's bookkeeping, effects) happens after the store has returned, from that plan.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

import msgspec

from persistence.stores.records import PendingWork, RunRecord, StepCommit


class Planned(Protocol):
    """A step a `StepPlanner` planned: the commit to write (and whatever else its planner keeps
    for after the write)."""

    @property
    def commit(self) -> StepCommit:
        """The step to write."""
        ...


PlanT = TypeVar("PlanT", bound=Planned)
PlanT_co = TypeVar("PlanT_co", bound=Planned, covariant=True)


class StepPlanner(Protocol[PlanT_co]):
    """Maps a run (as read under its lock, or at rest) and its pending work (the sent event
    last in its inbox) to the step to commit, or None to leave the event queued; with no side
    effects (see the module's docstring)."""

    def plan(self, run: RunRecord, work: PendingWork) -> PlanT_co | None:
        """The step of `run` with `work`, or None."""
        ...


class LeaveQueued:
    """The planner of a send that steps nothing: its event is queued for a worker."""

    def plan(self, run: RunRecord, work: PendingWork) -> None:
        """None: never a step."""
        del run, work


LEAVE_QUEUED = LeaveQueued()


class Sent(msgspec.Struct, Generic[PlanT], frozen=True):
    """What a send did: the inbox id its event got (0: a call's result dropped, its holder no
    longer held the call), the run's new version (None: the event was left queued) and the plan
    whose step was written with it (None: no step)."""

    inbox_id: int
    version: int | None = None
    plan: PlanT | None = None
