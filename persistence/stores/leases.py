"""Leases in SQL (the claims of `RunStore`), written once for both dialects: the claimable runs
found and leased in one write transaction (`CLAIMABLE`, `CLAIMABLE_BY_EVENT`), kept by
heartbeats, released without a step.
"""

from __future__ import annotations

from collections.abc import Collection

from persistence.stores.conflicts import retried
from persistence.stores.records import (
    PendingWork,
    RunRecord,
)
from persistence.stores.rules import (
    CLAIMABLE,
    CLAIMABLE_BY_EVENT,
    FREE,
)
from persistence.stores.steps import SQLSteps

PICKED_NAMES = "id, lease_owner, wake_at"
"""What a claim reads of a run before leasing it: the owner it takes over, when it was due."""


class SQLLeases(SQLSteps):
    """Leases in SQL: runs claimed (due, or with queued events), kept by heartbeats, released."""

    @retried
    def claim_runs(
        self,
        owner: str,
        now: int,
        lease_ms: int,
        limit: int,
        versions: Collection[tuple[str, str]] | None = None,
    ) -> list[RunRecord]:
        """Lease runs that are due or have queued events (`CLAIMABLE`, `CLAIMABLE_BY_EVENT`);
        a claimed row that does not parse is failed at once, never stepped or claimed again."""
        return self._claim(
            owner, now, lease_ms, limit, versions, with_work=False, fail_broken=True
        )[0]

    @retried
    def claim_work(
        self,
        owner: str,
        now: int,
        lease_ms: int,
        limit: int,
        versions: Collection[tuple[str, str]] | None = None,
    ) -> list[tuple[RunRecord, PendingWork]]:
        """`claim_runs` and the claimed runs' `pending_work` (PostgreSQL: one round trip); a
        claimed row that does not parse is returned leased, with its `problem`, for the worker
        to fail with its telemetry."""
        claimed, work = self._claim(
            owner, now, lease_ms, limit, versions, with_work=True, fail_broken=False
        )
        missing = [run.id for run in claimed if run.id not in work]
        if missing:
            work.update(self.pending_work(missing))
        return [(run, work[run.id]) for run in claimed]

    def _claim(
        self,
        owner: str,
        now: int,
        lease_ms: int,
        limit: int,
        versions: Collection[tuple[str, str]] | None,
        with_work: bool,
        fail_broken: bool,
    ) -> tuple[list[RunRecord], dict[str, PendingWork]]:
        """The claim shared by `claim_runs` and `claim_work`: rows that do not parse are, if
        `fail_broken`, failed at once and left out."""
        if versions is not None and not versions:
            return [], {}
        pairs = None if versions is None else sorted(set(versions))
        claimed, work = self._lease(owner, now, now + lease_ms, limit, pairs, with_work)
        if not fail_broken:
            return claimed, work
        for run in claimed:
            if run.problem is not None:
                self.fail_run(run.id, owner, run.problem, now)
        return [run for run in claimed if run.problem is None], work

    def _lease(
        self,
        owner: str,
        now: int,
        expires: int,
        limit: int,
        pairs: list[tuple[str, str]] | None,
        with_work: bool,
    ) -> tuple[list[RunRecord], dict[str, PendingWork]]:
        """Find and lease the claimable runs (each record knows its previous owner and when it
        was due): found, then leased, in one write transaction, whose lock keeps two claimers
        from one run. A dialect that reads the runs' pending work in the same round trip
        returns it when asked (`with_work`); here it is read after the claim."""
        version_sql, version_params = _version_filter(pairs)
        free = FREE.format(r="", now="?")
        due = CLAIMABLE.format(now="?", free=free)
        asked = CLAIMABLE_BY_EVENT.format(free=free)
        ts = self._t(now)
        with self._write() as conn:
            found = self._exec(
                conn,
                f"SELECT {PICKED_NAMES} FROM (SELECT {PICKED_NAMES} FROM workflow_runs WHERE "
                # priorities (issue 30): never negative, so a due run's order is at most now
                f"{due} AND {self._CLAIM_ORDER} <= ? {version_sql} "
                f"ORDER BY {self._CLAIM_ORDER} LIMIT ?) AS due UNION "
                f"SELECT {PICKED_NAMES} FROM (SELECT {PICKED_NAMES} FROM workflow_runs WHERE id "
                f"IN (SELECT run_id FROM workflow_inbox WHERE dead_at IS NULL) AND {asked} "
                f"{version_sql} LIMIT ?) AS asked LIMIT ?",
                (ts, ts, ts, *version_params, limit, ts, *version_params, limit, limit),
            ).fetchall()
            if not found:
                return [], {}
            previous = {run_id: (owner, due_at) for run_id, owner, due_at in found}
            marks = ",".join("?" * len(found))
            rows = self._exec(
                conn,
                "UPDATE workflow_runs SET lease_owner = ?, lease_expires_at = ?, wake_at = ?, "
                f"claim_count = claim_count + 1 WHERE id IN ({marks}) RETURNING {self.RUN_COLUMNS}",
                (owner, self._t(expires), self._t(expires), *previous),
            ).fetchall()
        return [self._run(r, *previous[r[0]]) for r in rows], {}

    @retried
    def heartbeat(self, owner: str, run_ids: Collection[str], now: int, lease_ms: int) -> set[str]:
        """Extend the caller's leases."""
        if not run_ids:
            return set()
        ids = [self._id(i) for i in run_ids]
        expires = self._t(now + lease_ms)
        rows = self._write_one(
            "UPDATE workflow_runs SET lease_expires_at = ?, wake_at = ? "
            f"WHERE lease_owner = ? AND id IN ({','.join('?' * len(ids))}) "
            f"RETURNING id{self._TEXT_ID}",
            (expires, expires, owner, *ids),
        )
        return {r[0] for r in rows}

    @retried
    def release(
        self,
        run_id: str,
        owner: str,
        wake_at: int | None,
        *,
        attempt_count: int | None = None,
        last_error: str | None = None,
    ) -> bool:
        """Give up a lease without stepping."""
        # no next wake: plain NULL (PostgreSQL types a CASE of NULLs as text, not timestamptz)
        wake, wake_params = (
            (
                "CASE WHEN status = 'active' OR EXISTS (SELECT 1 FROM "
                "workflow_effects e WHERE e.run_id = workflow_runs.id AND "
                "e.status = 'pending') THEN ? END",
                (self._t(wake_at),),
            )
            if wake_at is not None
            else ("NULL", ())
        )
        return bool(
            self._write_one(
                "UPDATE workflow_runs SET lease_owner = NULL, lease_expires_at = NULL, "
                f"wake_at = {wake}, attempt_count = coalesce(?, attempt_count), "
                "last_error = coalesce(?, last_error)"
                " WHERE id = ? AND lease_owner = ? RETURNING 1",
                (*wake_params, attempt_count, last_error, self._id(run_id), owner),
            )
        )


def _version_filter(pairs: list[tuple[str, str]] | None) -> tuple[str, tuple[str, ...]]:
    if pairs is None:
        return "", ()
    marks = ",".join("(?, ?)" for _ in pairs)
    return (
        f"AND (workflow_name, workflow_version) IN (VALUES {marks})",
        tuple(x for pair in pairs for x in pair),
    )
