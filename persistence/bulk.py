"""Bulk actions: cancel or resume every run a `RunQuery` matches (Temporal's batch operations),
for `statecharts runs cancel|resume --where ...`.

The matching runs are read in pages of ids (`Store.match_ids`, in id order after the last id
of the page before: stable whatever the action does to the runs passed), and each run is acted
on in a transaction of its own, as `Store.cancel_run` and `Runtime.resume` act on one run,
which journal it: no long lock, and a crash loses at most the run being acted on. The action only
counts what it did; a dry run reads the same pages and acts on none.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from persistence.runtime import NotResumableError, Runtime
from persistence.stores import (
    ACTIVE,
    ConflictError,
    RunFinishedError,
    RunNotFoundError,
    RunQuery,
    Store,
)

BATCH = 200
"""Runs read per page."""


@dataclass(slots=True)
class BulkReport:
    """What a bulk action did: each run's outcome (`runs`, in the order acted on) and their
    counts (`outcomes`: cancelled, requested, finished, resumed, refused; with `dry_run`,
    `would cancel` / `would resume`)."""

    dry_run: bool
    runs: list[tuple[str, str]] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)

    def add(self, run_id: str, outcome: str) -> None:
        """Record `outcome` for `run_id`."""
        self.runs.append((run_id, outcome))
        self.outcomes[outcome.split(":", 1)[0]] += 1

    @property
    def matched(self) -> int:
        """How many runs matched (and were acted on, unless a dry run)."""
        return len(self.runs)


def matching_ids(store: Store, query: RunQuery, batch: int = BATCH) -> Iterator[list[str]]:
    """Pages of the ids of the runs `query` matches (see the module docstring)."""
    after: str | None = None
    while True:
        ids = store.match_ids(query, after, batch)
        if not ids:
            return
        yield ids
        after = ids[-1]


def _each(
    store: Store, query: RunQuery, dry_run: bool, would: str, act: Callable[[str], str], batch: int
) -> BulkReport:
    """`act` on each run `query` matches (`would` instead in a dry run), page by page."""
    report = BulkReport(dry_run)
    for ids in matching_ids(store, query, batch):
        for run_id in ids:
            report.add(run_id, would if dry_run else act(run_id))
    return report


def cancel_matching(
    store: Store,
    query: RunQuery,
    reason: str | None,
    now: Callable[[], int],
    *,
    dry_run: bool = False,
    batch: int = BATCH,
) -> BulkReport:
    """Cancel every active run `query` matches (its status filter is replaced by `active`),
    with its active child runs, each journaled with `reason`: each outcome as
    `Store.cancel_run` returns it (a run that ended meanwhile is `finished`)."""

    def cancel(run_id: str) -> str:
        try:
            return store.cancel_run(run_id, now(), reason)
        except RunNotFoundError:  # (deleted meanwhile)
            return "finished"

    active = dataclasses.replace(query, status=ACTIVE)
    return _each(store, active, dry_run, "would cancel", cancel, batch)


def resume_matching(
    runtime: Runtime, query: RunQuery, *, dry_run: bool = False, batch: int = BATCH
) -> BulkReport:
    """Resume every failed run `query` matches (its status filter is replaced by `error`):
    `resumed`, or `refused: <why>` for a run `Runtime.resume` refuses."""

    def resume(run_id: str) -> str:
        try:
            runtime.resume(run_id)
        except (NotResumableError, RunFinishedError, ConflictError, RunNotFoundError) as exc:
            return f"refused: {exc}"
        return "resumed"

    failed = dataclasses.replace(query, status="error")
    return _each(runtime.store, failed, dry_run, "would resume", resume, batch)
