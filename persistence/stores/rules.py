"""The store's rules, written once for every backend: which runs a claim takes, the events and
reasons a store writes itself, the outbox key's format, and the checks on what callers pass."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from persistence.stores.errors import ConflictError
from persistence.stores.records import (
    ACTIVE,
    RUN_STATUSES,
    JSONDict,
    NewEffect,
    NewRun,
    StepCommit,
)
from statecharts.events import done_actor_event_type, error_actor_event_type
from statecharts.idempotency import KEY_LENGTH
from statecharts.idempotency import idempotency_key as provider_key

SEALED = "$enc"
"""The key-id field of an encrypted payload's envelope (`persistence.stores.codec`): a JSON
object with it and `ct` is a sealed payload."""

CALL = "call"
"""The outbox kind of an invoked function or coroutine that runs beside its run (a row of
`workflow_calls`, not of `workflow_effects`)."""

TRANSIENT_PREFIX = "transient failure"
"""How `last_error` starts while a run waits out the backoff of a transient failure."""

STOPPED_BY_EXIT = "stopped: its invoking state was left"

STOPPED_BY_END = "stopped: its run ended"


def is_call(effect: NewEffect) -> bool:
    """Whether a recorded effect is a call beside its run."""
    return effect.kind == CALL


def leasable_calls(effects: Sequence[NewEffect]) -> int:
    """How many of a step's calls may be leased to an executor in the step's own commit: all
    of them, unless the step also records effects its run executes itself, which run first
    (its calls are then claimed once those are done: `Calls.claim_calls`)."""
    count = sum(1 for e in effects if is_call(e))
    return count if count == len(effects) else 0


def unowned_calls(effects: Sequence[NewEffect], lease: tuple[str, int] | None) -> bool:
    """Whether a step records calls no executor holds yet (any worker's may claim them: wake
    the workers)."""
    return lease is None and any(is_call(e) for e in effects)


MAX_SKIP_RECORDS = 20
"""How many skip records a schedule keeps (the count of all skips is kept too)."""

GROUP_COLUMNS = frozenset({"workflow_name", "workflow_version", "state"})
"""Columns `Store.run_groups` may group runs by."""

CLAIMABLE = "wake_at <= {now} AND {free}"
"""Which runs a claim takes, once for every store (`{now}`/`{free}` filled in): due ones. A run
has a wake-up time only while it is active or has outbox effects left to run, so terminal runs
are never claimed for their queued events; queued events make only *active* runs claimable."""

PRIORITY_AGING_MS = 60_000
"""The aging rule of priorities: a run of priority p is claimed as if it had been due p times
this much earlier, so a priority-0 run due for 5 minutes goes before a priority-4 run due now,
and a long-due run is never starved by a stream of higher priorities."""

MAX_PRIORITY = 1000
"""Priorities are integers 0 (the default) to this; higher is claimed first."""


def aged(ms: int, priority: int | None) -> int:
    """Time `ms` (epoch ms) aged by `priority` (`PRIORITY_AGING_MS`; None: 0), as claims and
    a limit's queue order runs and calls (the stores' SQL spells it as `_AGED`)."""
    return ms - (priority or 0) * PRIORITY_AGING_MS


CLAIMABLE_BY_EVENT = "status = 'active' AND {free}"
"""Runs a queued (live) inbox event makes claimable: active ones only."""

FREE = "({r}lease_owner IS NULL OR {r}lease_expires_at <= {now})"
"""A run no live lease holds (`{r}`: the table's alias and a dot, or ""; `{now}`: the
parameter of the current time): what `CLAIMABLE` and `CLAIMABLE_BY_EVENT` take as `{free}`."""

HELD_FENCE = "{r}version = {expected} AND {r}lease_owner = {owner}"
"""The fence of a step's write of its run row taken under a lease: the run is still at the
version the step read and still leased to the step's writer (`{expected}`, `{owner}`: their
parameters)."""

UNLEASED_FENCE = "{r}version = {expected} AND {r}lease_owner IS NULL AND {r}status = 'active'"
"""The fence of a step taken with no claim (`StepCommit.unleased`; from rest too): the run is
still at the version read, nobody holds it, and it has not ended meanwhile."""


def ended_reason(status: str) -> str:
    """The dead-letter reason of an event left queued when its run ended in `status`."""
    return f"the run ended ({status}) before this event was applied"


FAILED_EVENT = "statecharts.failed"
"""Journal record of a run failed by the worker outside the engine (`Store.fail_run`)."""

RESUME_EVENT = "statecharts.resume"
"""Journal record of an operator's resume (`Store.resume_run`)."""

CANCEL_EVENT = "statecharts.cancel"
"""Inbox event type the store uses to ask the lease holder to cancel a leased run (and the
journal's record of a cancel)."""


def cancel_event(reason: str | None) -> JSONDict:
    """The cancel request queued for a lease holder, or journaled when the store cancels."""
    return {"type": CANCEL_EVENT, "reason": reason}


CHILD_RUN_FAILED = "ChildRunFailed"
"""The error name a parent receives when a child run failed outside its machine (the worker
failed it) or was cancelled by an operator."""


def child_ended_event(
    invoke_id: str, status: str, output: Any = None, error: Any = None, reason: str | None = None
) -> JSONDict:
    """What a parent run receives when its child run `invoke_id` ends in `status`, as an
    in-memory parent receives it from a child machine: `xstate.done.actor.<id>` with the
    child's `output` (done, done_partial), else `xstate.error.actor.<id>` with the child
    machine's `error`, or, for a child failed by its worker or cancelled by an operator,
    `{"name": "ChildRunFailed", "message": ...}` with the `reason`."""
    if status in ("done", "done_partial"):
        return {"type": done_actor_event_type(invoke_id), "output": output}
    if error is None:
        error = {"name": CHILD_RUN_FAILED, "message": f"child run {status}: {reason or status}"}
    return {"type": error_actor_event_type(invoke_id), "error": error}


FORK_EVENT = "statecharts.fork"
"""Journal record of the first step of a forked run (`Lifecycle.fork_run`)."""

RESET_EVENT = "statecharts.reset"
"""Journal record of a reset of a failed run to an earlier step (`Lifecycle.reset_run`)."""

STOPPED_BY_RESET = "stopped: its run was reset"

PURGE_BATCH = 200
"""Runs one purge transaction deletes at most (short transactions, no long locks)."""


def only_version(versions: Sequence[int | None], commit: StepCommit) -> int:
    """The new version `commit_steps` gave the one `commit`; `ConflictError` if not written."""
    (version,) = versions
    if version is None:
        raise ConflictError(
            f"run {commit.run_id}: not at version {commit.expected_version} under lease of "
            f"{commit.owner!r}, or an effect outcome is not pending; step not written"
        )
    return version


def check_last(last: int | None) -> None:
    """`last` of a listing is None (everything) or a count of at least 0."""
    if last is not None and last < 0:
        raise ValueError(f"last must be at least 0, got {last}")


def check_distinct_runs(commits: Sequence[StepCommit]) -> None:
    """One commit per run in a batch (a second would be checked against a stale version)."""
    if len({c.run_id for c in commits}) != len(commits):
        raise ValueError("commit_steps takes at most one commit per run")


def idempotency_key(run_id: str, step: int, index: int) -> str:
    """The outbox key of effect `index` produced by step `step` of run `run_id`."""
    return f"{run_id}:{step}:{index}"


def call_key(outbox_key: str, retry_key: str | None = None, length: int = KEY_LENGTH) -> str:
    """The idempotency key user code gets for the effect recorded as `outbox_key` (the form of
    `statecharts.idempotency`): scoped to the run; for a retried call its record key, the same
    across attempts and crashes, else the effect's own step and index."""
    run_id, _, place = outbox_key.partition(":")  # the format idempotency_key() writes
    return provider_key(run_id, retry_key or place, length)


def run_of_outbox_key(outbox_key: str) -> str:
    """The run id in an outbox key (see `idempotency_key`)."""
    return outbox_key.partition(":")[0]


def completion_times(status: str, now: int) -> tuple[int | None, int | None]:
    """(completed_at, failed_at) to set when a run enters `status`."""
    if status == ACTIVE:
        return None, None
    return now, (now if status == "error" else None)


def check_status(status: str) -> None:
    """Reject an unknown run status with a clear error."""
    if status not in RUN_STATUSES:
        raise ValueError(f"unknown run status {status!r}; expected one of {sorted(RUN_STATUSES)}")


def check_unkeyed(runs: Sequence[tuple[NewRun, Sequence[NewEffect]]]) -> None:
    """Reject, for `create_runs`, a run with a key or a parent, naming it."""
    for run, _ in runs:
        if run.key is not None or run.parent_run_id is not None:
            raise ValueError(
                f"create_runs inserts top-level runs without keys; run {run.id} has "
                f"{'key ' + repr(run.key) if run.key is not None else 'a parent'} "
                "(use create_run)"
            )


def check_group_column(column: str) -> None:
    """Reject a column `run_groups` cannot group by (it is put into SQL, so never trust it)."""
    if column not in GROUP_COLUMNS:
        expected = sorted(GROUP_COLUMNS)
        raise ValueError(f"cannot group runs by {column!r}; expected one of {expected}")
