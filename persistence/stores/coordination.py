"""Coordination in SQL (`Coordination`), written once for both dialects: named claims (one
holder at a time, taken over once stale), circuit breakers' shared state (compare-and-set on
a version) and schedules (advanced with the run they start, in one transaction).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from persistence.stores.conflicts import retried
from persistence.stores.records import (
    BreakerRecord,
    ClaimRecord,
    NewEffect,
    NewRun,
    RunRecord,
    ScheduleRecord,
)
from persistence.stores.rules import (
    MAX_SKIP_RECORDS,
)
from persistence.stores.runs import SQLRuns

_SCHEDULE_COLUMNS = "name, last_fire_at, version, last_run_id, buffered_at, skipped_count, skipped"


class ScheduleMoved(Exception):
    """Internal: the schedule's version moved; roll the transaction back."""


class SQLCoordination(SQLRuns):
    """`Coordination` in SQL: claims, breakers, schedules (a schedule fires with its run created
    in the same transaction: `SQLRuns` below it)."""

    @retried
    def try_claim(
        self, name: str, owner: str, now: int, stale_after_ms: int, run_id: str | None = None
    ) -> bool:
        """Take or refresh the claim `name`."""
        return bool(
            self._write_one(
                "INSERT INTO workflow_claims (name, owner, run_id, claimed_at, expires_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, "
                "run_id = excluded.run_id, claimed_at = excluded.claimed_at, "
                "expires_at = excluded.expires_at "
                "WHERE workflow_claims.owner = excluded.owner OR workflow_claims.expires_at <= ? "
                "RETURNING name",
                (
                    name,
                    owner,
                    None if run_id is None else self._id(run_id),
                    self._t(now),
                    self._t(now + stale_after_ms),
                    self._t(now),
                ),
            )
        )

    @retried
    def release_claim(self, name: str, owner: str) -> bool:
        """Drop our claim."""
        return bool(
            self._write_one(
                "DELETE FROM workflow_claims WHERE name = ? AND owner = ? RETURNING 1",
                (name, owner),
            )
        )

    def get_claim(self, name: str) -> ClaimRecord | None:
        """The current claim record."""
        rows = self._read(
            f"SELECT name, owner, run_id{self._TEXT_ID}, claimed_at, expires_at "
            "FROM workflow_claims WHERE name = ?",
            (name,),
        )
        if not rows:
            return None
        n, o, r, c, e = rows[0]
        return ClaimRecord(n, o, r, self._ms(c), self._ms(e))

    def get_breaker(self, name: str) -> BreakerRecord | None:
        """Stored breaker state."""
        rows = self._read(
            "SELECT name, state, failure_count, opened_at, data, updated_at, version "
            "FROM workflow_breakers WHERE name = ?",
            (name,),
        )
        if not rows:
            return None
        n, s, f, o, d, u, v = rows[0]
        return BreakerRecord(n, s, f, self._ms(o), self._load(d), self._ms(u), v)

    @retried
    def put_breaker(self, record: BreakerRecord, expected_version: int, now: int) -> bool:
        """Compare-and-set breaker state."""
        values = (
            record.state,
            record.failure_count,
            self._t(record.opened_at),
            self._j(record.data),
            self._t(now),
            record.name,
        )
        if expected_version == 0:
            return bool(
                self._write_one(
                    "INSERT INTO workflow_breakers (state, failure_count, opened_at, data, "
                    "updated_at, name, version) VALUES (?, ?, ?, ?, ?, ?, 1) "
                    "ON CONFLICT (name) DO NOTHING RETURNING 1",
                    values,
                )
            )
        return bool(
            self._write_one(
                "UPDATE workflow_breakers SET state = ?, failure_count = ?, opened_at = ?, "
                "data = ?, updated_at = ?, version = version + 1 "
                "WHERE name = ? AND version = ? RETURNING 1",
                (*values, expected_version),
            )
        )

    def get_schedule(self, name: str) -> ScheduleRecord | None:
        """Stored schedule state."""
        rows = self._read(
            f"SELECT {_SCHEDULE_COLUMNS} FROM workflow_schedules WHERE name = ?", (name,)
        )
        return self._schedule(rows[0]) if rows else None

    def list_schedules(self, limit: int = 100) -> list[ScheduleRecord]:
        """Stored schedules, by name."""
        return [
            self._schedule(row)
            for row in self._read(
                f"SELECT {_SCHEDULE_COLUMNS} FROM workflow_schedules ORDER BY name LIMIT ?",
                (limit,),
            )
        ]

    def _schedule(self, row: Sequence[Any]) -> ScheduleRecord:
        n, last, v, run_id, buffered, count, skipped = row
        records = self._load(skipped)
        return ScheduleRecord(
            n,
            self._ms(last),
            v,
            run_id,
            self._ms(buffered),
            int(count),
            tuple(records) if isinstance(records, list) else (),
        )

    @retried
    def fire_schedule(
        self,
        name: str,
        expected_version: int,
        fire_at: int,
        run: NewRun,
        effects: Sequence[NewEffect],
        now: int,
        *,
        children: Sequence[tuple[NewRun, Sequence[NewEffect]]] = (),
        buffered_at: int | None = None,
        skipped: Sequence[Mapping[str, Any]] = (),
    ) -> RunRecord | None:
        """Advance the schedule and create its run (with its child runs) together."""
        try:
            with self._write() as conn:
                record, created = self._create_run_in(conn, run, effects, now)
                self._advance_schedule(
                    conn, name, expected_version, fire_at, record.id, buffered_at, skipped
                )
                if created:
                    self._create_all_in(conn, [(run, ())], children, now)
                return record
        except ScheduleMoved:
            return None

    @retried
    def skip_schedule(
        self,
        name: str,
        expected_version: int,
        decided_to: int,
        now: int,
        *,
        buffered_at: int | None,
        skipped: Sequence[Mapping[str, Any]],
    ) -> bool:
        """Advance the schedule past skipped or buffered slots, starting no run."""
        try:
            with self._write() as conn:
                self._advance_schedule(
                    conn, name, expected_version, decided_to, None, buffered_at, skipped
                )
                return True
        except ScheduleMoved:
            return False

    def _advance_schedule(
        self,
        conn: Any,
        name: str,
        expected_version: int,
        decided_to: int,
        run_id: str | None,
        buffered_at: int | None,
        skipped: Sequence[Mapping[str, Any]],
    ) -> None:
        """Move the schedule to its next version (`ScheduleMoved` if it is not at
        `expected_version`): decided up to `decided_to`, its last run `run_id` (kept if None),
        its buffered slot, its skip records (the latest `MAX_SKIP_RECORDS`) and count."""
        previous = self._exec(
            conn,
            "SELECT skipped, skipped_count, last_run_id, version FROM workflow_schedules "
            "WHERE name = ?",
            (name,),
        ).fetchone()
        if (previous[3] if previous else 0) != expected_version:
            raise ScheduleMoved
        kept = self._load(previous[0]) if previous else []
        records = [*(kept if isinstance(kept, list) else []), *skipped][-MAX_SKIP_RECORDS:]
        count = (int(previous[1]) if previous else 0) + sum(int(r["count"]) for r in skipped)
        values = (
            self._t(decided_to),
            run_id if run_id is not None else (previous[2] if previous else None),
            self._t(buffered_at),
            count,
            self._j(records),
        )
        if previous is None:
            moved = self._exec(
                conn,
                "INSERT INTO workflow_schedules (last_fire_at, last_run_id, buffered_at, "
                "skipped_count, skipped, name, version) VALUES (?, ?, ?, ?, ?, ?, 1) "
                "ON CONFLICT (name) DO NOTHING RETURNING 1",
                (*values, name),
            ).fetchall()
        else:
            moved = self._exec(
                conn,
                "UPDATE workflow_schedules SET last_fire_at = ?, last_run_id = ?, "
                "buffered_at = ?, skipped_count = ?, skipped = ?, version = version + 1 "
                "WHERE name = ? AND version = ? RETURNING 1",
                (*values, name, expected_version),
            ).fetchall()
        if not moved:
            raise ScheduleMoved
