"""The run lifecycle around the steps (docs/persistence.md, "Run lifecycle"): retention, fork
and reset.

- Retention: `purge` deletes ended runs in bounded batches (`Lifecycle.purge_runs`, one short
  transaction each) and keeps each purged top-level run's key for `key_window_ms`, so that a
  start with the key still answers with the purged run (`RunPurgedError`). `Retention` is the
  per-workflow policy a worker applies every report interval, a bounded batch per pass.
- Fork: a new run from the snapshot after a journal step of any run, linked to it
  (`Fork`); its calls in flight at that step are recorded afresh, with the new run's keys.
- Reset: a failed run put back, in place, to the snapshot after an earlier journal step: the
  journal is kept and the reset journaled; its open calls are stopped and those in flight at
  that step recorded afresh (new keys: the new step's).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol

from msgspec import structs

from persistence.capacity import LoadControl
from persistence.children import child_run_ids
from persistence.columns import run_columns
from persistence.resting import Resting
from persistence.stores import NewEffect, NewRun, RunFinishedError, RunRecord, Store
from persistence.stores.records import ACTIVE, PurgedRun
from persistence.stores.rules import CALL, PURGE_BATCH
from persistence.stores.run_ids import new_run_id
from persistence.telemetry import Telemetry
from statecharts import Machine, Snapshot
from statecharts.snapshot import finished_child

Duration = timedelta | int | str
"""A duration: a `timedelta`, milliseconds, or text such as `30d`, `12h`, `15m`, `45s`."""

DEFAULT_KEY_WINDOW = timedelta(days=7)
"""How long a purged run's key keeps answering "already started" unless told otherwise."""

MAX_PURGE_RUNS = 100_000
"""The most runs one `purge` call deletes (batch after batch); a larger backlog is left for the
next call, so no call runs unbounded."""

MAX_PASS_RUNS = 5_000
"""The most runs of one workflow a worker's retention pass purges (`Retention.apply`): with
the default report interval of a minute, 5,000 ended runs a minute per workflow, in batches of
`PURGE_BATCH`; a larger backlog shrinks by that much each pass."""

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d|w)\s*$")


def duration_ms(value: Duration, what: str = "duration") -> int:
    """`value` in milliseconds; `ValueError` naming `what` for anything else or a negative."""
    if isinstance(value, timedelta):
        ms = int(value.total_seconds() * 1000)
    elif isinstance(value, int) and not isinstance(value, bool):
        ms = value
    elif isinstance(value, str) and (match := _DURATION.match(value)) is not None:
        ms = int(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise ValueError(
            f"{what}: {value!r} is not a duration (a timedelta, milliseconds, or "
            "text like 30d, 12h, 15m, 45s, 500ms)"
        )
    if ms < 0:
        raise ValueError(f"{what}: {value!r} is negative")
    return ms


class _Now(Protocol):
    def now(self) -> int: ...


class Host(Protocol):
    """What fork and reset need of the runtime (`persistence.runtime.Runtime` is one)."""

    @property
    def store(self) -> Store: ...
    @property
    def clock(self) -> _Now: ...
    @property
    def telemetry(self) -> Telemetry: ...
    @property
    def resting(self) -> Resting: ...

    def machine_for(self, run: RunRecord) -> Machine | None:
        """The definition that restores `run` (its version, or a migration), or None."""
        ...

    def search_values(self, workflow: str, snapshot: Snapshot) -> tuple[tuple[str, str], ...]:
        """A new run's search attributes, from its first snapshot's context."""
        ...

    @property
    def load(self) -> LoadControl: ...


class NotRestorableError(ValueError):
    """A fork or reset that cannot be made: no such step, no snapshot recorded for it, no
    registered definition restores it, a call or child run in flight that cannot be started
    again, or (reset) a run that has not failed."""


@dataclass(frozen=True, slots=True)
class PurgeReport:
    """What a purge did (or, dry, would do)."""

    purged: int
    dry_run: bool
    runs: list[PurgedRun] = field(default_factory=list)
    """The runs purged (dry: the first batch of those it would purge)."""
    more: bool = False
    """Runs were left for a later call (`max_runs` reached)."""


def purge(
    store: Store,
    ended_before: int,
    now: int,
    *,
    workflow: str | None = None,
    key_window_ms: int | None,
    batch: int = PURGE_BATCH,
    max_runs: int = MAX_PURGE_RUNS,
    dry_run: bool = False,
) -> PurgeReport:
    """Delete the runs that ended before `ended_before` (of `workflow` only, if given), batch
    after batch (each its own short transaction), at most `max_runs`; keep each purged
    top-level run's key for `key_window_ms` (None: keys are forgotten with their runs)."""
    if dry_run:
        sample = store.purge_runs(ended_before, now, workflow=workflow, limit=batch, dry_run=True)
        return PurgeReport(store.count_purgeable(ended_before, workflow=workflow), True, sample)
    keep = None if key_window_ms is None else now + key_window_ms
    done: list[PurgedRun] = []
    while len(done) < max_runs:
        limit = min(batch, max_runs - len(done))
        purged = store.purge_runs(
            ended_before, now, workflow=workflow, limit=limit, keep_keys_until=keep
        )
        done += purged
        if len(purged) < limit:  # none left (or only runs a worker holds)
            return PurgeReport(len(done), False, done)
    return PurgeReport(len(done), False, done, more=True)


@dataclass(frozen=True, slots=True)
class Retention:
    """How long each workflow's ended runs are kept (`periods`, ms by workflow) and how long
    a purged run's key keeps answering (`key_window_ms`). Workers apply it at every report
    interval (`apply`), a bounded batch per workflow per pass."""

    periods: Mapping[str, int]
    key_window_ms: int = int(DEFAULT_KEY_WINDOW.total_seconds() * 1000)

    @classmethod
    def of(
        cls, machines: Sequence[Machine], given: Mapping[str, Duration], key_window: Duration
    ) -> Retention:
        """The policy from each machine's `meta.retention` (a `Duration`), overridden by
        `given`; every workflow named must be one of `machines`."""
        found: dict[str, Duration] = {
            m.id: m.root.meta["retention"]
            for m in machines
            if isinstance(m.root.meta, Mapping) and m.root.meta.get("retention") is not None
        }
        found.update(given)
        known = {m.id for m in machines}
        unknown = sorted(set(found) - known)
        if unknown:
            raise ValueError(
                f"retention names workflows that are not among the runtime's "
                f"machines: {unknown} (known: {', '.join(sorted(known))})"
            )
        return cls(
            {name: duration_ms(value, f"retention of {name!r}") for name, value in found.items()},
            duration_ms(key_window, "key_window"),
        )

    def apply(
        self, store: Store, now: int, batch: int = PURGE_BATCH, max_runs: int = MAX_PASS_RUNS
    ) -> int:
        """One bounded pass: at most `max_runs` of each workflow's expired runs (in batches
        of `batch`, each its own transaction), and as many expired key tombstones; how many
        runs it purged."""
        purged = 0
        for name, period in sorted(self.periods.items()):
            purged += purge(
                store,
                now - period,
                now,
                workflow=name,
                batch=batch,
                key_window_ms=self.key_window_ms,
                max_runs=max_runs,
            ).purged
        expired = batch
        for _ in range(max(1, max_runs // batch)):  # as many as it may have added, or more
            if expired < batch:
                break
            expired = store.expire_tombstones(now, batch)
        return purged


# -- fork and reset --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Restored:
    """The snapshot after a journal step, restored, with what a fork or reset records."""

    machine: Machine
    snapshot: Snapshot
    step: int
    """The journal step the snapshot is from (the newest at or before the one asked for)."""
    effects: list[NewEffect]
    """The starts of the calls in flight at that step, recorded afresh."""


def restore_step(runtime: Host, run: RunRecord, step: int) -> Restored:
    """The snapshot of `run` after journal step `step`, restored by a registered definition,
    with its calls in flight; `NotRestorableError` saying why not."""
    if step < 1 or step > run.version:
        raise NotRestorableError(f"run {run.id}: no step {step} (its steps are 1 to {run.version})")
    found = runtime.store.journal_snapshot(run.id, step)
    if found is None:
        raise NotRestorableError(
            f"run {run.id}: its journal has no snapshot at or before step {step} (the first "
            "step a worker took is the first one recorded; a run with the journal off, or "
            "stepped before schema 13, has none)"
        )
    at, data = found
    machine = runtime.machine_for(structs.replace(run, snapshot=data))
    label = data.get("version")
    if machine is None:
        raise NotRestorableError(
            f"run {run.id}: its snapshot at step {at} is {run.workflow_name} version "
            f"{run.workflow_version}{f' (label {label!r})' if label else ''}, which no "
            "registered definition or migration restores"
        )
    try:
        snapshot = machine.restore(data)
    except Exception as exc:
        raise NotRestorableError(
            f"run {run.id}: its snapshot at step {at} does not restore with {machine.id}: {exc}"
        ) from exc
    if snapshot.status != ACTIVE:
        raise NotRestorableError(
            f"run {run.id}: it had ended ({snapshot.status}) at step {at}; give an earlier step"
        )
    return Restored(machine, snapshot, at, _in_flight(runtime.store, run, machine, snapshot, at))


def _in_flight(
    store: Store, run: RunRecord, machine: Machine, snapshot: Snapshot, at: int
) -> list[NewEffect]:
    """The starts of the calls `snapshot` (after step `at`) waits for, to record afresh; a
    child run in flight cannot be started again (`NotRestorableError`)."""
    live = [ref.id for ref in snapshot.children.values() if finished_child(ref) is None]
    runs = child_run_ids(machine, snapshot) & set(live)
    if runs:
        raise NotRestorableError(
            f"run {run.id}: at step {at} it waits for child run(s) "
            f"{sorted(runs)}, which a fork or reset cannot start again; "
            "give a step before they were invoked or after they ended"
        )
    starts = store.call_starts(run.id, live, at)
    missing = sorted(set(live) - set(starts))
    if missing:
        raise NotRestorableError(
            f"run {run.id}: at step {at} it waits for {missing}, whose "
            "start is not recorded; it cannot be started again"
        )
    return [
        NewEffect(i, kind, payload)
        for i, (kind, payload) in enumerate(starts[call_id] for call_id in live)
    ]


def fork(runtime: Host, run: RunRecord, step: int) -> RunRecord:
    """A new run from `run`'s snapshot after journal step `step` (see `Runtime.fork`)."""
    restored = restore_step(runtime, run, step)
    now = runtime.clock.now()
    effects = restored.effects
    columns = run_columns(
        restored.snapshot, now=now, pending_effects=any(e.kind != CALL for e in effects)
    )
    new = NewRun(
        id=new_run_id(),
        workflow_name=run.workflow_name,
        workflow_version=restored.machine.fingerprint,
        key=None,
        state=columns.state,
        snapshot=restored.machine.persist(restored.snapshot),
        status=columns.status,
        wake_at=columns.wake_at,
        priority=run.priority,
        limit_share=runtime.load.start_share(run.workflow_name, restored.snapshot.context),
        search=runtime.search_values(run.workflow_name, restored.snapshot),
    )
    record = runtime.store.fork_run(new, run.id, restored.step, effects, now)
    runtime.telemetry.run_started(run.workflow_name)
    return record


def reset(runtime: Host, run: RunRecord, step: int) -> RunRecord:
    """`run`, failed, put back to its snapshot after journal step `step` (`Runtime.reset`)."""
    if run.status != "error":
        raise NotRestorableError(
            f"run {run.id} is {run.status}; only a failed run is reset (fork any run instead)"
        )
    if run.parent_run_id is not None:
        raise NotRestorableError(
            f"run {run.id} is a child run of {run.parent_run_id}, which "
            "took its failure; fork it, or reset its parent"
        )
    restored = restore_step(runtime, run, step)
    now = runtime.clock.now()
    columns = run_columns(
        restored.snapshot, now=now, pending_effects=any(e.kind != CALL for e in restored.effects)
    )
    try:
        record = runtime.store.reset_run(
            run.id,
            run.version,
            restored.machine.persist(restored.snapshot),
            columns.state,
            columns.wake_at,
            restored.step,
            restored.effects,
            now,
            search=runtime.search_values(run.workflow_name, restored.snapshot),
        )
    except RunFinishedError as exc:  # it moved meanwhile (resumed, reset by someone else)
        raise NotRestorableError(str(exc)) from exc
    runtime.resting.drop(run.id)
    return record
