"""The run lifecycle in SQL (the `Lifecycle` part of the store), written once for both dialects.

Retention: `purge_runs` deletes ended runs in batches of one short transaction each. The rows
a run owns go with it through the foreign keys (`ON DELETE CASCADE`: journal, outbox, inbox and
dead letters, calls and their attempts, deliveries, capacity places, fork links); on
PostgreSQL the batch's runs are locked with `SKIP LOCKED`, so a purge never waits for (nor
makes wait) a transaction that holds one of them. A purged top-level run's key is kept in
`workflow_key_tombstones` until the key window ends: `create_run(key_once=True)` reads it
under the key's lock, after the runs with the key, so a start racing the purge sees the run
or its tombstone, never neither.

Fork and reset: the last journal row of every engine step keeps the snapshot after the step
(`workflow_events.snapshot`); `journal_snapshot` reads it back, `fork_run` inserts a new run
from it and `reset_run` puts a failed run back to it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from persistence.stores.codec import Column
from persistence.stores.conflicts import retried
from persistence.stores.errors import ConflictError
from persistence.stores.records import (
    Fork,
    JSONDict,
    NewEffect,
    NewRun,
    PurgedRun,
    RunPurgedError,
    RunRecord,
    Tombstone,
)
from persistence.stores.rules import CALL, FORK_EVENT, PURGE_BATCH, RESET_EVENT, STOPPED_BY_RESET
from persistence.stores.runs import SQLRuns

_PURGEABLE = (
    "FROM workflow_runs r WHERE r.status <> 'active' AND r.completed_at < ?{workflow} "
    "AND r.wake_at IS NULL AND r.lease_owner IS NULL "
    # never a run whose parent still runs (it waits for its result) ...
    "AND NOT EXISTS (SELECT 1 FROM workflow_runs p WHERE r.parent_run_id IS NOT NULL "
    "AND p.id = {parent} AND p.status = 'active') "
    # ... nor one with a child still running (it reports to its parent)
    "AND NOT EXISTS (SELECT 1 FROM workflow_runs c WHERE c.parent_run_id = CAST(r.id AS TEXT) "
    "AND c.status = 'active') "
    "AND NOT EXISTS (SELECT 1 FROM workflow_calls k WHERE k.run_id = r.id "
    "AND k.status IN ('pending', 'running'))"
)
"""The ended runs a purge may delete (`{workflow}`: the workflow filter or nothing; `{parent}`:
the parent's id as the id column's type): not due (no effect left to run), not leased, no live
parent or child, no open call."""

_TOMBSTONE = (
    "INSERT INTO workflow_key_tombstones (workflow_name, key, run_id, purged_at, "
    "expires_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (workflow_name, key) DO UPDATE "
    "SET run_id = excluded.run_id, purged_at = excluded.purged_at, "
    "expires_at = excluded.expires_at"
)


class SQLLifecycle(SQLRuns):
    """`Lifecycle` in SQL, mixed into `sql.SQLStore` over its dialect hooks."""

    # -- retention ----------------------------------------------------------------------------
    def _purgeable(self, ended_before: int, workflow: str | None) -> tuple[str, list[Any]]:
        """`_PURGEABLE` in this dialect, with its parameters."""
        sql = _PURGEABLE.format(
            workflow="" if workflow is None else " AND r.workflow_name = ?",
            parent=self._AS_ID.format("r.parent_run_id"),
        )
        return sql, [self._t(ended_before), *([] if workflow is None else [workflow])]

    @retried
    def purge_runs(
        self,
        ended_before: int,
        now: int,
        *,
        workflow: str | None = None,
        limit: int = PURGE_BATCH,
        keep_keys_until: int | None = None,
        dry_run: bool = False,
    ) -> list[PurgedRun]:
        """Delete one batch of ended runs (see `Lifecycle.purge_runs`)."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        where, params = self._purgeable(ended_before, workflow)
        pick = (
            f"SELECT r.id{self._TEXT_ID}, r.workflow_name, r.key, r.status, r.completed_at, "
            f"r.parent_run_id, r.created_at {where} ORDER BY r.completed_at LIMIT ?"
        )
        if dry_run:
            rows = self._read(pick, [*params, limit])
            return [self._purged(row) for row in rows]
        lock = " FOR UPDATE OF r SKIP LOCKED" if self._SKIP_LOCKED else ""
        with self._write() as conn:
            rows = self._exec(conn, pick + lock, [*params, limit]).fetchall()
            if not rows:
                return []
            ids = [self._id(str(row[0])) for row in rows]
            self._exec(
                conn, f"DELETE FROM workflow_runs WHERE id IN ({','.join('?' * len(ids))})", ids
            )
            purged = [self._purged(row) for row in rows]
            if keep_keys_until is not None:
                self._keep_keys_in(conn, purged, rows, now, keep_keys_until)
        return purged

    def _keep_keys_in(
        self, conn: Any, purged: Sequence[PurgedRun], rows: Sequence[Any], now: int, until: int
    ) -> None:
        """The tombstones of the purged top-level runs' keys: per key, its newest run's."""
        newest: dict[tuple[str, str], tuple[Any, str]] = {}
        for run, row in zip(purged, rows, strict=True):
            if run.key is None or run.parent_run_id is not None:
                continue  # a child run's key is named under its parent; no start takes it
            slot = (run.workflow_name, run.key)
            created = self._ms(row[6])
            if slot not in newest or created > newest[slot][0]:
                newest[slot] = (created, run.id)
        self._many(
            conn,
            _TOMBSTONE,
            [
                (name, key, self._id(run_id), self._t(now), self._t(until))
                for (name, key), (_, run_id) in sorted(newest.items())
            ],
        )

    def _purged(self, row: Sequence[Any]) -> PurgedRun:
        return PurgedRun(str(row[0]), row[1], row[2], row[3], self._ms(row[4]), row[5])

    def count_purgeable(self, ended_before: int, *, workflow: str | None = None) -> int:
        """How many runs a purge would delete."""
        where, params = self._purgeable(ended_before, workflow)
        return int(self._read(f"SELECT count(*) {where}", params)[0][0])

    @retried
    def expire_tombstones(self, now: int, limit: int = PURGE_BATCH) -> int:
        """Delete expired key tombstones, at most `limit`."""
        rows = self._write_one(
            "DELETE FROM workflow_key_tombstones WHERE (workflow_name, key) IN (SELECT "
            "workflow_name, key FROM workflow_key_tombstones WHERE expires_at <= ? "
            "ORDER BY expires_at LIMIT ?) RETURNING 1",
            (self._t(now), limit),
        )
        return len(rows)

    def _key_holder_in(self, conn: Any, run: NewRun, now: int) -> RunRecord | None:
        """The newest run with `run`'s key (`SQLRuns._key_holder_in`), else, if its run was
        purged within the key window, `RunPurgedError` naming that run: read after the runs,
        under the key's lock, so a start racing a purge sees the run or its tombstone."""
        holder = super()._key_holder_in(conn, run, now)
        if holder is None and run.key is not None:
            tomb = self._tombstone_in(conn, run.workflow_name, run.key, now)
            if tomb is not None:
                raise RunPurgedError(tomb)
        return holder

    def tombstone(self, workflow_name: str, key: str, now: int) -> Tombstone | None:
        """The unexpired tombstone of a purged run's key."""
        with self._connection() as conn:
            return self._tombstone_in(conn, workflow_name, key, now)

    def _tombstone_in(self, conn: Any, workflow_name: str, key: str, now: int) -> Tombstone | None:
        rows = self._exec(
            conn,
            f"SELECT workflow_name, key, run_id{self._TEXT_ID}, purged_at, expires_at FROM "
            "workflow_key_tombstones WHERE workflow_name = ? AND key = ? AND expires_at > ?",
            (workflow_name, key, self._t(now)),
        ).fetchall()
        if not rows:
            return None
        name, found_key, run_id, purged_at, expires_at = rows[0]
        return Tombstone(name, found_key, str(run_id), self._ms(purged_at), self._ms(expires_at))

    # -- fork and reset -----------------------------------------------------------------------
    def journal_snapshot(self, run_id: str, step: int) -> tuple[int, JSONDict] | None:
        """The newest snapshot the journal recorded at or before `step`."""
        rows = self._read(
            "SELECT step, snapshot FROM workflow_events WHERE run_id = ? AND step <= ? AND "
            "snapshot IS NOT NULL ORDER BY step DESC, id DESC LIMIT 1",
            (self._id(run_id), step),
        )
        if not rows:
            return None
        found, snapshot = rows[0]
        return int(found), self._open(snapshot, self._id(run_id), Column.SNAPSHOT)

    def call_starts(
        self, run_id: str, call_ids: Collection[str], step: int
    ) -> dict[str, tuple[str, JSONDict]]:
        """The newest start of each of `call_ids` recorded by step `step`."""
        if not call_ids:
            return {}
        rid, marks = self._id(run_id), ",".join("?" * len(call_ids))
        found: dict[str, tuple[str, JSONDict]] = {}
        for call_id, payload in self._read(
            f"SELECT call_id, payload FROM workflow_calls WHERE run_id = ? AND step <= ? AND "
            f"call_id IN ({marks}) ORDER BY step, idempotency_key",
            (rid, step, *call_ids),
        ):
            found[str(call_id)] = (CALL, self._open(payload, rid, Column.CALL_PAYLOAD))
        for kind, payload in self._read(
            "SELECT kind, payload FROM workflow_effects WHERE run_id = ? AND step <= ? AND "
            "kind = 'start_child' ORDER BY step, effect_index",
            (rid, step),
        ):
            data = self._open(payload, rid, Column.EFFECT_PAYLOAD)
            if isinstance(data, Mapping) and data.get("id") in call_ids:
                found[str(data["id"])] = (str(kind), dict(data))
        return found

    @retried
    def fork_run(
        self, run: NewRun, source: str, step: int, effects: Sequence[NewEffect], now: int
    ) -> RunRecord:
        """Insert the fork with its first journal row and its link, in one transaction."""
        ts = self._t(now)
        with self._write() as conn:
            record, created = self._create_run_in(conn, run, effects, now)
            if not created:  # (a fork has no key: nothing to collide with)
                raise ConflictError(f"run {run.id} exists; fork not written")
            rid = self._id(record.id)
            self._exec(
                conn,
                "INSERT INTO workflow_forks (run_id, forked_from, step, created_at) "
                "VALUES (?, ?, ?, ?)",
                (rid, self._id(source), step, ts),
            )
            self._journal_snapshot_in(
                conn,
                rid,
                1,
                {"type": FORK_EVENT, "run_id": source, "step": step},
                run.state,
                run.snapshot,
                ts,
            )
        if run.wake_at is not None or any(e.kind == CALL for e in effects):
            self.wakeup().notify()
        return record

    @retried
    def reset_run(
        self,
        run_id: str,
        expected_version: int,
        snapshot: JSONDict,
        state: str,
        wake_at: int | None,
        step: int,
        effects: Sequence[NewEffect],
        now: int,
        *,
        search: Sequence[tuple[str, str]] = (),
    ) -> RunRecord:
        """Put the failed run back to the snapshot after journal step `step`."""
        rid, ts = self._id(run_id), self._t(now)
        with self._write() as conn:
            run = self._reactivate_in(
                conn, run_id, expected_version, snapshot, state, wake_at, now, "reset"
            )
            self._stop_calls_in(conn, rid, None, None, now, STOPPED_BY_RESET)
            self._exec(
                conn,
                "UPDATE workflow_effects SET status = 'skipped', result = ?, "
                "updated_at = ? WHERE run_id = ? AND status = 'pending'",
                (self._seal("reset", rid, Column.EFFECT_RESULT), ts, rid),
            )
            self._insert_effects(conn, run_id, run.version, effects, now)
            self._insert_calls_in(conn, run_id, run.version, effects, now, None)
            self._exec(conn, "DELETE FROM workflow_search WHERE run_id = ?", (rid,))
            self._many(
                conn,
                "INSERT INTO workflow_search (run_id, name, value) VALUES (?, ?, ?)",
                [(rid, name, value) for name, value in search],
            )
            self._journal_snapshot_in(
                conn, rid, run.version, {"type": RESET_EVENT, "step": step}, state, snapshot, ts
            )
        if run.wake_at is not None or effects:
            self.wakeup().notify()
        return run

    def _journal_snapshot_in(
        self,
        conn: Any,
        run_id: str,
        step: int,
        event: JSONDict,
        state: str,
        snapshot: JSONDict,
        ts: Any,
    ) -> None:
        """Journal a step the store took itself that set the run's snapshot (a fork's first
        step, a reset), with that snapshot: a later fork or reset may start from it."""
        self._exec(
            conn,
            "INSERT INTO workflow_events (run_id, step, event, state_before, state_after, "
            "created_at, snapshot) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                run_id,
                step,
                self._seal(event, run_id, Column.JOURNAL),
                state,
                state,
                ts,
                self._seal(snapshot, run_id, Column.SNAPSHOT),
            ),
        )

    def fork_of(self, run_id: str) -> Fork | None:
        """The fork link of run `run_id`, if it is a fork."""
        rows = self._read(
            f"SELECT run_id{self._TEXT_ID}, forked_from{self._TEXT_ID}, step, created_at FROM "
            "workflow_forks WHERE run_id = ?",
            (self._id(run_id),),
        )
        if not rows:
            return None
        run, source, step, created = rows[0]
        return Fork(str(run), str(source), int(step), self._ms(created))
