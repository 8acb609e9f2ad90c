"""The inbox in SQL (the sends of `RunStore`), written once for both dialects: events queued for a
run by its callers (`send_event`, at most once per delivery id with `send_delivery`) and by
other runs (`Delivery`: a child's end to its parent, an event to a child by invoke id or
systemId), read back oldest first, and dead-lettered when their run has ended.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from persistence.stores.codec import Column
from persistence.stores.conflicts import retried
from persistence.stores.dialect import DEAD_NAMES, INBOX_NAMES, SQLDialect
from persistence.stores.errors import RunFinishedError, RunNotFoundError
from persistence.stores.records import (
    DeadLetter,
    Delivery,
    InboxEvent,
)
from persistence.stores.rules import (
    ended_reason,
)

_QUEUE_EVENT = (
    "INSERT INTO workflow_inbox (run_id, event, created_at, traceparent, call_key) "
    "SELECT id, ?, ?, ?, ? FROM workflow_runs WHERE id = ? AND status = 'active' "
    "RETURNING id"
)
"""Queue an event for a run that is still active (`send_event`, `send_and_step`)."""

_SEEN = "SELECT inbox_id FROM workflow_deliveries WHERE run_id = ? AND delivery_id = ?"
_RECORD_DELIVERY = (
    "INSERT INTO workflow_deliveries (run_id, delivery_id, inbox_id, created_at) "
    "VALUES (?, ?, ?, ?) ON CONFLICT (run_id, delivery_id) DO NOTHING "
    "RETURNING inbox_id"
)
"""A delivery's record (`send_delivery`): looked up, then written with its queued event."""

_REASON_BEFORE, _REASON_AFTER = ended_reason("\x00").split("\x00")
_RUN_TREE = (
    "WITH RECURSIVE up (id, parent) AS (SELECT id, parent_run_id FROM workflow_runs WHERE id = ?"
    " UNION SELECT r.id, r.parent_run_id FROM workflow_runs r JOIN up ON r.id = {parent_id}), "
    "tree (id, key, parent, invoke, workflow) AS (SELECT id, key, parent_run_id, "
    "parent_invoke_id, workflow_name FROM workflow_runs WHERE id IN (SELECT id FROM up WHERE "
    "parent IS NULL) UNION SELECT r.id, r.key, r.parent_run_id, r.parent_invoke_id, "
    "r.workflow_name FROM workflow_runs r JOIN tree ON r.parent_run_id = tree.id{t} "
    "WHERE r.status = 'active') "
)
"""The run tree of the run `?`: its root (found up the parent links) and the root's active
descendants (down the child index), as `tree`. `UNION` ends the walk on a cycle a bad row might
make. A child run in it holds a systemId when it is still its parent's child (`invoke`) and its
key is that systemId (`SYSTEM_ID_HOLDER`)."""
SYSTEM_ID_HOLDER = "parent IS NOT NULL AND invoke IS NOT NULL AND key = ?"

log = logging.getLogger("statecharts.runs")


class _Delivered(Exception):
    """Internal: the delivery was recorded by a concurrent transaction; roll this one back."""


class SQLInbox(SQLDialect):
    """The inbox in SQL: events queued for runs (sent to them, delivered between them), and
    the dead letters of those that can no longer be applied."""

    @retried
    def send_event(
        self, run_id: str, event: Mapping[str, Any], now: int, *, traceparent: str | None = None
    ) -> int:
        """Queue an event for an active run, with the sender's `traceparent` (one statement;
        the status is read only to say why nothing was queued)."""
        rid = self._id(run_id)
        inserted = self._write_one(
            _QUEUE_EVENT + self._NOTIFY, self._queued(rid, event, now, traceparent)
        )
        if inserted:
            self.wakeup().notify(rid)
            return int(inserted[0][0])
        rows = self._read("SELECT status FROM workflow_runs WHERE id = ?", (rid,))
        if not rows:
            raise RunNotFoundError(f"no run with id {run_id!r}")
        raise RunFinishedError(f"run {run_id} has ended ({rows[0][0]})")

    @retried
    def send_delivery(
        self,
        run_id: str,
        event: Mapping[str, Any],
        now: int,
        delivery_id: str,
        *,
        traceparent: str | None = None,
    ) -> tuple[int, bool]:
        """`send_event` at most once per (run, `delivery_id`): the delivery is recorded in the
        transaction that queues the event (`workflow_deliveries`, schema 7). When it is already
        recorded, nothing is queued and the inbox id its event got is returned with False (also
        when the run has ended since)."""
        rid = self._id(run_id)
        try:
            inbox_id, queued = self._send_delivery_in(
                rid, run_id, event, now, delivery_id, traceparent
            )
        except _Delivered:  # a concurrent delivery of the same id committed first
            inbox_id, queued = int(self._read(_SEEN, (rid, delivery_id))[0][0]), False
        if queued:
            self.wakeup().notify(rid)
        return inbox_id, queued

    def _send_delivery_in(
        self,
        rid: str,
        run_id: str,
        event: Mapping[str, Any],
        now: int,
        delivery_id: str,
        traceparent: str | None,
    ) -> tuple[int, bool]:
        """`send_delivery`'s transaction."""
        with self._write() as conn:
            known = self._exec(conn, _SEEN, (rid, delivery_id)).fetchall()
            if known:
                return int(known[0][0]), False
            inserted = self._exec(
                conn, _QUEUE_EVENT + self._NOTIFY, self._queued(rid, event, now, traceparent)
            ).fetchall()
            if not inserted:
                status = self._exec(
                    conn, "SELECT status FROM workflow_runs WHERE id = ?", (rid,)
                ).fetchall()
                if not status:
                    raise RunNotFoundError(f"no run with id {run_id!r}")
                raise RunFinishedError(f"run {run_id} has ended ({status[0][0]})")
            inbox_id = int(inserted[0][0])
            # A concurrent delivery of the same id (PostgreSQL) waits here for the first to
            # commit and inserts nothing: it rolls back its queued event, answers the first's.
            recorded = self._exec(
                conn, _RECORD_DELIVERY, (rid, delivery_id, inbox_id, self._t(now))
            ).fetchall()
            if not recorded:
                raise _Delivered
            return inbox_id, True

    def _queued(
        self,
        rid: str,
        event: Mapping[str, Any],
        now: int,
        traceparent: str | None,
        call_key: str | None = None,
    ) -> tuple[Any, ...]:
        """`_QUEUE_EVENT`'s parameters (`call_key`: the call whose result it is)."""
        return (
            self._seal(dict(event), rid, Column.EVENT),
            self._t(now),
            traceparent,
            call_key,
            rid,
        )

    def pending_events(self, run_id: str) -> list[InboxEvent]:
        """Queued events, oldest first."""
        rows = self._read(
            f"SELECT {INBOX_NAMES.format(t=self._TEXT_ID)} FROM workflow_inbox WHERE run_id = ? "
            "AND dead_at IS NULL ORDER BY id",
            (self._id(run_id),),
        )
        return [self._inbox(r) for r in rows]

    def _dead_letter(self, conn: Any, run_id: str, status: str, ts: Any) -> None:
        """The run's still-queued events become dead letters: it ended in `status`."""
        self._exec(
            conn,
            "UPDATE workflow_inbox SET dead_at = ?, dead_reason = ? "
            "WHERE run_id = ? AND dead_at IS NULL",
            (ts, ended_reason(status), run_id),
        )

    @retried
    def sweep_dead_letters(self, now: int) -> list[DeadLetter]:
        """Live events of ended runs become dead letters: each live event's run probed by its
        key, in a subquery the planner cannot turn into a join (with the inbox's statistics
        taken while it was empty, the join read the ended runs' whole index for each event:
        seconds at 20,000 runs)."""
        rows = self._write_one(
            "UPDATE workflow_inbox SET dead_at = ?, dead_reason = ? || "
            "(SELECT status FROM workflow_runs r WHERE r.id = workflow_inbox.run_id) || ? "
            "WHERE dead_at IS NULL AND "
            "(SELECT status FROM workflow_runs r WHERE r.id = workflow_inbox.run_id) <> 'active' "
            f"RETURNING {DEAD_NAMES.format(t=self._TEXT_ID)}",
            (self._t(now), _REASON_BEFORE, _REASON_AFTER),
        )
        return [self._dead(r) for r in rows]

    def _run_tree(self) -> str:
        """`_RUN_TREE` in this dialect."""
        return _RUN_TREE.format(parent_id=self._AS_ID.format("up.parent"), t=self._TEXT_ID)

    def _tree_in(self, conn: Any, run_id: str) -> tuple[str, tuple[Any, ...]]:
        """The `WITH` clause that names run `run_id`'s run tree `tree` (`_RUN_TREE`), and its
        parameters."""
        return self._run_tree(), (run_id,)

    def _lock_tree_in(self, conn: Any, run_id: str) -> None:
        """Take `_LOCK_TREE` on run `run_id`'s tree, if the dialect has one."""
        if self._LOCK_TREE:
            self._exec(conn, self._run_tree() + self._LOCK_TREE, (run_id,))

    def _deliver_in(self, conn: Any, run_id: str, delivery: Delivery, now: int) -> None:
        """Queue `delivery` from run `run_id` (see `Delivery`) in the open transaction."""
        ts = self._t(now)
        if delivery.child is not None:
            target = delivery.child  # its own child's invoke id first, then a systemId
            # (found first: its event is sealed for the run it goes to)
            tree, tree_params = self._tree_in(conn, run_id)
            found = self._exec(
                conn,
                f"{tree}SELECT id{self._TEXT_ID} FROM tree WHERE (parent = ? AND "
                f"invoke = ?) OR ({SYSTEM_ID_HOLDER}) ORDER BY CASE WHEN parent = ? AND "
                "invoke = ? THEN 0 ELSE 1 END LIMIT 1",
                (*tree_params, run_id, target, target, run_id, target),
            ).fetchall()
            if not found:
                self._undeliverable_in(
                    conn,
                    run_id,
                    delivery,
                    f"no active child run {target!r}"
                    " (its own by invoke id, or by systemId in its run tree)",
                    now,
                )
                return
            child = str(found[0][0])
            self._exec(
                conn,
                "INSERT INTO workflow_inbox (run_id, event, created_at) VALUES (?, ?, ?)",
                (child, self._seal(delivery.event, child, Column.EVENT), ts),
            )
            return
        if delivery.parent is None:
            self._undeliverable_in(conn, run_id, delivery, "the run has no parent run", now)
            return
        parent_id = self._id(delivery.parent)
        event = self._seal(delivery.event, parent_id, Column.EVENT)
        sql = (
            "INSERT INTO workflow_inbox (run_id, event, created_at, dead_at, dead_reason) "
            "SELECT id, ?, ?, CASE WHEN status = 'active' THEN NULL ELSE ? END, "
            "CASE WHEN status = 'active' THEN NULL ELSE ? || status || ? END "
            "FROM workflow_runs WHERE id = ?"
        )
        params = [event, ts, ts, _REASON_BEFORE, _REASON_AFTER, parent_id]
        if delivery.completes:  # unless the parent stopped this child (it waits no more)
            sql += (
                " AND EXISTS (SELECT 1 FROM workflow_runs c WHERE c.id = ? AND "
                "c.parent_invoke_id IS NOT NULL)"
            )
            params.append(self._id(run_id))
        self._exec(conn, sql, params)

    def _undeliverable_in(
        self, conn: Any, run_id: str, delivery: Delivery, why: str, now: int
    ) -> None:
        """An event a run sent that has no one to go to: logged, and a dead letter of the
        sender (listed with its run's dead letters)."""
        reason = f"not delivered: {why}"
        log.warning(
            "run %s: event %r dead-lettered: %s", run_id, delivery.event.get("type"), reason
        )
        ts = self._t(now)
        self._exec(
            conn,
            "INSERT INTO workflow_inbox (run_id, event, created_at, dead_at, "
            "dead_reason) VALUES (?, ?, ?, ?, ?)",
            (
                self._id(run_id),
                self._seal(delivery.event, self._id(run_id), Column.EVENT),
                ts,
                ts,
                reason,
            ),
        )
