"""Named limits in SQL (the `Capacity` part of the store), written once for both dialects.

Every grant of a limit happens under the lock of its `workflow_limits` row (an upsert, which
locks the row in PostgreSQL; SQLite's write transaction serializes anyway), so two workers can
never both take the last slot. A slot (`workflow_capacity`, state `held`) counts while its
holder works (`_LIVE_HOLD`): a call (the holder is its idempotency key) while its lease lives, a
run (`run:<id>`) while its lease lives or, for a limited workflow's run, any of its calls is
open; a SIGKILLed holder's slot is revived as the head of the queue once its lease expires,
never lost and never counted twice. Holders that must wait are queued (`waiting`, in
`queued_at` order, kept across waits and crashes) and their run, or their call (`acquire_capacity`'s
`call`: the run goes on), released; a freed slot is `reserved` for the first of them and it is
woken (a run, or a call made due), so a newcomer cannot take a waiting holder's place.
Costs per grant: a handful of statements over at most `max_in_flight` slot rows plus the queue's
head, never the whole queue; every read of the queue is a bounded page, and a walk past places
of runs that ended stops at the queue's end (it deletes each such place as it passes it).

Lock order. Every capacity transaction locks rows in one order, and touches one limit:

1. the limit's `workflow_limits` row (the grant's and the sweep's lock; a pause's upsert);
2. that limit's `workflow_capacity` rows (slots, reservations, places in the queue);
3. `workflow_runs` then `workflow_calls` rows last: the runs it wakes, the calls it wakes,
   then the asker's own run or call (a step, too, locks its run before its calls; a step that
   stops a call touches no capacity row: the slot's liveness and the queue's reads follow the
   call's row).

A transaction without the limit's lock (a reservation taken up, a newcomer joining a queue)
starts at 2 and never goes back to 1: when such a fast path locked a row without
answering (a race), it is rolled back, releasing what it locked, and the grant is asked again
under the limit's lock in a transaction of its own. A call that needs places of two limits takes
them one transaction each (`LoadControl.enter`). What this order cannot exclude (PostgreSQL
picking a transaction as a deadlock victim against other writers of the same run rows, or a
serialization failure: SQLSTATE 40P01 / 40001) is not an error of the call: the whole
transaction is run again after a short jittered backoff, at most `ATTEMPTS` times, each retry
logged (`_transaction`, `persistence.stores.conflicts`, as every store call that writes).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from persistence.stores.conflicts import retried, run_again
from persistence.stores.records import (
    Grant,
    LimitUsage,
)
from persistence.stores.rules import MAX_PRIORITY, aged
from persistence.stores.steps import SQLSteps

CAPACITY = "waiting for capacity"
RATE = "rate limited"
PAUSED = "paused by Retry-After"
"""The reasons a run waits for a limit, shown as "<reason>: <limit name>" on its row."""

PARK_PAGE = 500
"""How many unclaimed runs of a limit's backlog one refusal queues at most (`_park`)."""

_LIVE_HOLD = (
    "(EXISTS (SELECT 1 FROM workflow_runs r WHERE r.id = workflow_capacity.run_id AND "
    "r.lease_owner = workflow_capacity.owner AND r.lease_expires_at > ?) OR "
    "EXISTS (SELECT 1 FROM workflow_calls c WHERE c.run_id = workflow_capacity.run_id AND "
    "((c.status IN ('running', 'stopped') AND c.lease_expires_at > ? AND "
    "(c.idempotency_key = workflow_capacity.holder OR "
    "substr(workflow_capacity.holder, 1, 4) = 'run:')) OR "
    "(c.status = 'pending' AND substr(workflow_capacity.holder, 1, 4) = 'run:'))) OR "
    "(substr(workflow_capacity.holder, 1, 4) = 'run:' AND EXISTS (SELECT 1 FROM workflow_inbox i "
    "JOIN workflow_runs q ON q.id = i.run_id WHERE i.run_id = workflow_capacity.run_id AND "
    "i.dead_at IS NULL AND q.status = 'active')))"
)
"""A held slot counts while its holder works. A run's (`run:<id>`, or a test's holder) while
that run keeps the lease it was granted under. A call's (its idempotency key) while the call
runs under a lease that has not expired, including a call stopped while it ran, until its
executor sees it end and gives the slot back or its lease runs out: a stopped function may
take a moment to return, and the downstream must never see more calls than the limit (an
ended or SIGKILLed call's slot is free). A run of a limited workflow's (`run:<id>`) also while
any call of the run is open or still working, or an event (a call's result) is queued for it
while it is active (an ended run's queued events are dead letters to be),
so that the run counts while its calls work beside it and its own next step, the one that
applies a call's result, finds its place held: not requeued behind the limit's whole queue
(at the time it was granted), refused, and claimed again for its queued event until a slot
came back to it."""
T = TypeVar("T")


class SQLCapacity(SQLSteps):
    """`Capacity` in SQL: slots, the queue, the rate window and pauses of named limits (a refused
    run is released to wait, a broken one failed: `SQLSteps` below it)."""

    def acquire_capacity(
        self,
        name: str,
        holder: str,
        run_id: str,
        owner: str,
        now: int,
        *,
        max_in_flight: int | None,
        calls: int | None,
        per_ms: int,
        recheck_ms: int,
        lease_ms: int,
        call: str | None = None,
    ) -> Grant:
        """Grant a place in limit `name`, or queue `holder` and release the run (with `call`:
        that call of the run, leased to `owner`) to wait (see `Capacity`)."""
        rid = self._id(run_id)
        asker = _Asker(rid, owner, call)

        def grant(conn: Any, fast: bool) -> tuple[Grant, bool]:
            if fast:  # no rate window to keep
                answer = self._without_lock(conn, name, holder, asker, now, recheck_ms)
                if answer is not None:
                    return answer, False
            return self._under_lock(
                conn,
                name,
                holder,
                asker,
                now,
                max_in_flight=max_in_flight,
                calls=calls,
                per_ms=per_ms,
                recheck_ms=recheck_ms,
                lease_ms=lease_ms,
            )

        try:
            granted, woke = self._transaction(
                lambda conn: grant(conn, max_in_flight is not None and calls is None)
            )
        except _Unanswered:  # (its row locks are gone with its rollback: see the lock order)
            granted, woke = self._transaction(lambda conn: grant(conn, False))
        if woke:
            self.wakeup().notify()
        return granted

    def release_capacity(
        self,
        name: str,
        holders: Collection[str],
        now: int,
        *,
        max_in_flight: int | None,
        lease_ms: int,
    ) -> None:
        """Free `holders`' slots and reserve them for the head of the queue, woken (with no
        holders: only the slots freed by expired leases and those reserved for calls that have
        ended, as workers do now and then and a step that stops a call does)."""
        if max_in_flight is None:
            return

        def release(conn: Any) -> bool:
            self._lock_limit(conn, name, now)
            if holders:
                marks = ",".join("?" * len(holders))
                self._exec(
                    conn,
                    f"DELETE FROM workflow_capacity WHERE name = ? AND holder IN ({marks})",
                    (name, *holders),
                )
            _, woken = self._place(conn, name, None, None, now, max_in_flight, lease_ms)
            return self._wake(conn, name, woken, now)

        if self._transaction(release):
            self.wakeup().notify()

    @retried
    def pause_capacity(self, name: str, until: int, now: int) -> None:
        """Pause limit `name` until `until` (extending, never shortening, a pause)."""
        self._write_one(
            "INSERT INTO workflow_limits (name, paused_until, recent, updated_at) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
            "paused_until = CASE WHEN workflow_limits.paused_until IS NULL OR "
            "workflow_limits.paused_until < excluded.paused_until THEN excluded.paused_until "
            "ELSE workflow_limits.paused_until END, updated_at = excluded.updated_at "
            "RETURNING 1",
            (name, self._t(until), self._j([]), self._t(now)),
        )

    def limit_shares(self, name: str, after: str | None = None, count: int = 500) -> list[str]:
        """The stored names of per-key limit `name`'s shares (`name[<key>]`) that have slots or
        a queue, in name order after `after`: one page of at most `count`."""
        prefix = f"{name}["
        return [
            str(n)
            for (n,) in self._read(
                "SELECT name FROM workflow_limits WHERE substr(name, 1, ?) = ? AND name > ? AND "
                "EXISTS (SELECT 1 FROM workflow_capacity c WHERE c.name = workflow_limits.name) "
                "ORDER BY name LIMIT ?",
                (len(prefix), prefix, after or "", count),
            )
        ]

    def capacity_usage(self, now: int) -> list[LimitUsage]:
        """Calls in flight, waiting runs per reason and the pause of every limit."""
        ts = self._t(now)
        with self._connection() as conn:
            live, live_params = self._live_hold_in(conn, None, ts)
        limits, held, waiting, calls_waiting = self._read_all(
            [
                ("SELECT name, paused_until FROM workflow_limits ORDER BY name", ()),
                (
                    "SELECT name, count(*) FROM workflow_capacity WHERE state = 'held' AND "
                    f"{live} GROUP BY name",
                    live_params,
                ),
                (
                    "SELECT waiting_for, count(*) FROM workflow_runs WHERE waiting_for IS NOT NULL "
                    "AND status = 'active' GROUP BY waiting_for",
                    (),
                ),
                (
                    "SELECT waiting_for, count(*) FROM workflow_calls WHERE "
                    "waiting_for IS NOT NULL AND status = 'pending' GROUP BY waiting_for",
                    (),
                ),
            ]
        )
        in_flight = {str(n): int(c) for n, c in held}
        waits: dict[str, dict[str, int]] = {}
        for text, count in [*waiting, *calls_waiting]:
            reason, _, limit = str(text).rpartition(": ")
            waits.setdefault(limit, {})[reason] = int(count)
        paused = {str(n): self._ms(p) for n, p in limits}
        names = sorted(set(paused) | set(in_flight) | set(waits))
        return [
            LimitUsage(
                n,
                in_flight.get(n, 0),
                waits.get(n, {}),
                p if (p := paused.get(n)) is not None and p > now else None,
            )
            for n in names
        ]

    def _live_hold_in(self, conn: Any, name: str | None, ts: Any) -> tuple[str, tuple[Any, ...]]:
        """SQL true of a `workflow_capacity` row (of limit `name`; None: of any) whose holder
        still lives at `ts` (`_LIVE_HOLD`), and its parameters."""
        return _LIVE_HOLD, (ts, ts)

    # -- the steps of a grant, inside its transaction -------------------------------------------
    def _transaction(self, body: Callable[[Any], T]) -> T:
        """`body(conn)` in a write transaction of its own, run again from the start when the
        database rolls it back to resolve a deadlock or a serialization failure
        (`conflicts.run_again`): nothing of it was written, and the conflict is the
        database's, not the call's."""

        def once() -> T:
            with self._write() as conn:
                return body(conn)

        return run_again(once, "a capacity transaction")

    def _without_lock(
        self, conn: Any, name: str, holder: str, asker: _Asker, now: int, recheck_ms: int
    ) -> Grant | None:
        """The two answers that need not the limit's lock (None: ask under it, in this
        transaction: nothing is locked yet). First a read without locks says which, if any,
        applies. A slot reserved for `holder` becomes its own (the count of taken slots does
        not change; the slot's row lock orders this against a sweep taking an expired
        reservation back). And while others wait in the queue no newcomer can have a slot (a
        free one is owed to the queue's head), so it joins the queue at once: a herd is refused
        in parallel, not one by one behind the limit's lock that releases take. It joins only
        while a holder other than itself still waits, as its insert reads it (a release that
        reserved the last waiting holder's slot first leaves it to ask under the lock); a slot
        freed while it joins is reserved for the heads that release saw, and one left over
        goes to it with the next release or sweep. A statement that may have locked a row
        without answering (the read was overtaken) raises `_Unanswered`: the limit's lock is
        never taken after a slot's (the module's lock order)."""
        ts = self._t(now)
        unpaused = "NOT EXISTS (SELECT 1 FROM workflow_limits WHERE name = ? AND paused_until > ?)"
        state, queued, free_to_go = self._exec(
            conn,
            "SELECT (SELECT state FROM workflow_capacity WHERE name = ? AND holder = ?), "
            "EXISTS (SELECT 1 FROM workflow_capacity WHERE name = ? AND state = 'waiting' AND "
            f"holder <> ?), {unpaused}",
            (name, holder, name, holder, name, ts),
        ).fetchone()
        if not free_to_go:
            return None  # paused: the locked path says until when
        if state == "reserved":
            if (
                self._exec(
                    conn,
                    "UPDATE workflow_capacity SET state = 'held', "
                    "owner = ?, expires_at = NULL WHERE "
                    f"name = ? AND holder = ? AND state = 'reserved' AND {unpaused} RETURNING 1",
                    (asker.owner, name, holder, name, ts),
                ).fetchone()
                is None
            ):
                raise _Unanswered
            return self._granted(conn, asker)
        if not queued or state not in (None, "waiting"):
            return None
        place = self._arrival(conn, holder, asker, now)
        if (
            self._exec(
                conn,
                "INSERT INTO workflow_capacity (name, holder, run_id, state, queued_at) "
                "SELECT ?, ?, ?, 'waiting', ? WHERE EXISTS (SELECT 1 FROM workflow_capacity WHERE "
                f"name = ? AND state = 'waiting' AND holder <> ?) AND {unpaused} "
                "ON CONFLICT (name, holder) DO UPDATE SET owner = NULL WHERE "
                "workflow_capacity.state = 'waiting' RETURNING 1",
                (name, holder, asker.run_id, place, name, holder, name, ts),
            ).fetchone()
            is None
        ):
            raise _Unanswered
        parked = self._park(conn, name, holder, asker, now, recheck_ms)
        return self._wait(conn, asker, f"{CAPACITY}: {name}", now, now + recheck_ms, parked)

    def _under_lock(
        self,
        conn: Any,
        name: str,
        holder: str,
        asker: _Asker,
        now: int,
        *,
        max_in_flight: int | None,
        calls: int | None,
        per_ms: int,
        recheck_ms: int,
        lease_ms: int,
    ) -> tuple[Grant, bool]:
        """The grant under the limit's lock: its pause, its slots (`_place`) and its rate
        window; the runs and calls woken for slots reserved on the way are written after every
        slot row, before the asker's own run or call (the module's lock order). With whether
        any were woken (`_wake`)."""
        run_id, owner = asker.run_id, asker.owner
        paused, recent = self._lock_limit(conn, name, now)
        if paused is not None and paused > now:
            return self._wait(conn, asker, f"{PAUSED}: {name}", now, paused), False
        granted, woken = True, list[Any]()
        if max_in_flight is not None:
            granted, woken = self._place(conn, name, holder, run_id, now, max_in_flight, lease_ms)
        refused: tuple[str, int] | None = None
        if not granted:
            refused = f"{CAPACITY}: {name}", now + recheck_ms
        elif calls is not None:
            window = [t for t in recent if t > now - per_ms]
            if len(window) >= calls:  # (a concurrency place is kept for the next window)
                refused = f"{RATE}: {name}", window[-calls] + per_ms
            else:
                self._exec(
                    conn,
                    "UPDATE workflow_limits SET recent = ? WHERE name = ?",
                    (self._j([*window, now]), name),
                )
        parked: tuple[str, ...] = ()
        if max_in_flight is not None and refused is not None:
            self._queue(conn, name, holder, run_id, self._arrival(conn, holder, asker, now))
            if not granted:
                parked = self._park(conn, name, holder, asker, now, recheck_ms)
        elif max_in_flight is not None:
            self._exec(
                conn,
                "INSERT INTO workflow_capacity (name, holder, run_id, state, owner, queued_at)"
                " VALUES (?, ?, ?, 'held', ?, ?) ON CONFLICT (name, holder) DO UPDATE SET "
                "state = 'held', owner = excluded.owner, expires_at = NULL",
                (name, holder, run_id, owner, self._t(now)),
            )
        woke = self._wake(conn, name, woken, now)
        if refused is not None:
            return self._wait(conn, asker, refused[0], now, refused[1], parked), woke
        return self._granted(conn, asker), woke

    def _lock_limit(self, conn: Any, name: str, now: int) -> tuple[int | None, list[int]]:
        """Lock the limit's row (creating it), returning its pause and its rate window."""
        row = self._exec(
            conn,
            "INSERT INTO workflow_limits (name, recent, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET updated_at = excluded.updated_at "
            "RETURNING paused_until, recent",
            (name, self._j([]), self._t(now)),
        ).fetchone()
        recent = self._load(row[1])
        return self._ms(row[0]), [int(t) for t in recent] if isinstance(recent, list) else []

    def _place(
        self,
        conn: Any,
        name: str,
        holder: str | None,
        run_id: str | None,
        now: int,
        max_in_flight: int,
        lease_ms: int,
    ) -> tuple[bool, list[tuple[str, Any]]]:
        """Whether `holder` may take a slot now; the other free slots are reserved for the
        head of the queue, whose holders and runs (returned, the runs as parameters) the
        caller wakes (`_wake`) once it has written its slot rows. With `holder` None, only
        reserves free slots for the queue."""
        ts = self._t(now)
        # slots of holders whose lease ended, and reservations nobody came for, queue again
        # (at their old place: first in line)
        # (the states are named, so only that part of the queue index is read: never the
        # waiting runs, however many there are)
        live, live_params = self._live_hold_in(conn, name, ts)
        self._exec(
            conn,
            "UPDATE workflow_capacity SET state = 'waiting', owner = NULL, expires_at = NULL "
            "WHERE name = ? AND state IN ('held', 'reserved') AND CASE WHEN state = 'reserved' "
            f"THEN expires_at <= ? ELSE NOT {live} END",
            (name, ts, *live_params),
        )
        taken = self._taken_holders(
            conn,
            name,
            self._exec(
                conn,
                f"SELECT holder, state, run_id{self._TEXT_ID} FROM workflow_capacity WHERE "
                "name = ? AND state IN ('held', 'reserved')",
                (name,),
            ).fetchall(),
        )
        if holder is not None and holder in taken:
            return True, []  # reserved for it (or already its own)
        free = max_in_flight - len(taken)
        if free <= 0:
            return False, []
        heads = self._heads(conn, name, free)
        granted = holder is not None and (holder in heads or len(heads) < free)
        others = {h: r for h, r in heads.items() if h != holder}
        if not others:
            return granted, []
        # (still waiting: read without a row lock)
        reserved = [
            str(h)
            for (h,) in self._exec(
                conn,
                "UPDATE workflow_capacity SET state = 'reserved', expires_at = ? WHERE "
                f"name = ? AND holder IN ({','.join('?' * len(others))}) AND state = 'waiting' "
                "RETURNING holder",
                (self._t(now + lease_ms), name, *others),
            ).fetchall()
        ]
        return granted, [(h, others[h]) for h in reserved]

    def _taken_holders(
        self, conn: Any, name: str, slots: Sequence[tuple[Any, Any, Any]]
    ) -> list[str]:
        """The holders of the taken `slots` (holder, state, run id) of `name`, less those
        reserved for a call that ended before it took its slot (a woken call stopped by a step
        that left its invoking state, or its run's end): that slot is deleted, free for the
        queue's next holder now rather than when the reservation runs out."""
        reserved = [(str(h), r) for h, state, r in slots if state == "reserved"]
        ended = self._ended_calls(conn, reserved) if reserved else set()
        if ended:
            self._exec(
                conn,
                f"DELETE FROM workflow_capacity WHERE name = ? AND state = 'reserved' AND "
                f"holder IN ({','.join('?' * len(ended))})",
                (name, *sorted(ended)),
            )
        return [str(h) for h, _, _ in slots if str(h) not in ended]

    def _wake(self, conn: Any, name: str, woken: Sequence[tuple[str, Any]], now: int) -> bool:
        """Wake the holders a slot of `name` was reserved for: a reserved slot is capacity
        standing idle, so what takes it is claimed before anything else (as if due long ago, at
        the top priority). A call's place wakes the call (its row made due), a run's the run
        and its calls that wait for `name` (a call of a limited workflow's run asks for the
        run's place); not the run whose call waits for it while the run itself does not: that
        call takes the reserved place, and a claim of the run would only take it first for a
        drive with nothing to step. Runs first, then calls (a step locks its run, then its
        calls). Other processes' workers and call executors are told when it commits (a
        NOTIFY); True when some were woken, for the caller to tell this process's once it has
        committed (told before, a worker's claim could miss them and then wait out its poll
        interval: a queue drained at one slot per poll)."""
        if not woken:
            return False
        first = self._t(aged(now, MAX_PRIORITY))
        runs, holders = [r for _, r in woken], [h for h, _ in woken]
        in_runs, in_holders = ",".join("?" * len(runs)), ",".join("?" * len(holders))
        reason = f"{CAPACITY}: {name}"
        self._exec(
            conn,
            f"UPDATE workflow_runs SET wake_at = ? WHERE id IN ({in_runs}) AND lease_owner IS "
            "NULL AND status = 'active' AND (waiting_for = ? OR NOT EXISTS (SELECT 1 FROM "
            "workflow_calls c WHERE c.run_id = workflow_runs.id AND (c.idempotency_key IN "
            f"({in_holders}) OR (c.status = 'pending' AND c.waiting_for = ?))))",
            (first, *runs, reason, *holders, reason),
        )
        self._exec(
            conn,
            f"UPDATE workflow_calls SET available_at = ? WHERE run_id IN ({in_runs}) AND "
            "status = 'pending' AND waiting_for = ? AND (idempotency_key IN "
            f"({in_holders}) OR 'run:' || run_id{self._TEXT_ID} IN ({in_holders}))",
            (first, *runs, reason, *holders, *holders),
        )
        self._notify_in(conn, None)
        return True

    def _heads(self, conn: Any, name: str, count: int) -> dict[str, Any]:
        """The first `count` holders in the queue whose runs are still active; places of runs
        that ended meanwhile (cancelled while waiting) are deleted on the way. Read from the
        queue's index a page at a time, each page after the last place read (never a place
        twice), then the runs by id: never a plan that reads every waiting run. A short page
        is the queue's end; a page goes on only past places it deleted, so the walk ends
        (a queue shorter than `count` is common: a dead holder's slot requeued with a second
        slot free). Holder -> run id (as a parameter)."""
        heads: dict[str, Any] = {}
        after: tuple[Any, str] | None = None
        while len(heads) < count:
            wanted = count - len(heads)
            rows = self._exec(
                conn,
                f"SELECT holder, run_id{self._TEXT_ID}, queued_at FROM workflow_capacity WHERE "
                "name = ? AND state = 'waiting'"
                f"{'' if after is None else ' AND (queued_at, holder) > (?, ?)'} "
                "ORDER BY queued_at, holder LIMIT ?",
                (name, *(after or ()), wanted),
            ).fetchall()
            if not rows:
                break
            marks = ",".join("?" * len(rows))
            active = {
                str(r)
                for (r,) in self._exec(
                    conn,
                    f"SELECT id{self._TEXT_ID} FROM workflow_runs WHERE id IN ({marks}) AND "
                    "status = 'active'",
                    [self._id(str(r)) for _, r, _ in rows],
                )
            }
            ended = self._ended_calls(conn, [(str(h), r) for h, r, _ in rows])
            gone = [str(h) for h, r, _ in rows if str(r) not in active or str(h) in ended]
            if gone:
                self._exec(
                    conn,
                    f"DELETE FROM workflow_capacity WHERE name = ? AND holder IN "
                    f"({','.join('?' * len(gone))})",
                    (name, *gone),
                )
            heads.update((str(h), self._id(str(r))) for h, r, _ in rows if str(r) in active)
            if len(rows) < wanted:  # the queue's end
                break
            after = (rows[-1][2], str(rows[-1][0]))
        return heads

    def _ended_calls(self, conn: Any, places: Sequence[tuple[str, Any]]) -> set[str]:
        """The holders among `places` (holder, run) that are calls no longer open (stopped,
        done, failed): their places in the queue are gone with them."""
        runs = {str(r) for _, r in places}
        found = self._exec(
            conn,
            f"SELECT idempotency_key FROM workflow_calls WHERE run_id IN "
            f"({','.join('?' * len(runs))}) AND idempotency_key IN "
            f"({','.join('?' * len(places))}) AND status NOT IN ('pending', 'running')",
            (*[self._id(r) for r in runs], *[h for h, _ in places]),
        ).fetchall()
        return {str(h) for (h,) in found}

    def _granted(self, conn: Any, asker: _Asker) -> Grant:
        """The run (the call) no longer waits for anything."""
        if asker.call is not None:
            self._exec(
                conn,
                "UPDATE workflow_calls SET waiting_for = NULL WHERE run_id = ? AND "
                "idempotency_key = ? AND coalesce(waiting_for, '') <> ''",
                (asker.run_id, asker.call),
            )
            return Grant(True)
        # (not `waiting_for IS NOT NULL`: that would let a planner read the partial index
        # of every waiting run, which stale statistics say is empty, instead of one row)
        self._exec(
            conn,
            "UPDATE workflow_runs SET waiting_for = NULL WHERE id = ? AND "
            "coalesce(waiting_for, '') <> ''",
            (asker.run_id,),
        )
        return Grant(True)

    def _queue(self, conn: Any, name: str, holder: str, run_id: str, place: Any) -> None:
        """Put `holder` in the queue of `name` at `place` (`_arrival`), keeping its place if
        it had one."""
        self._exec(
            conn,
            "INSERT INTO workflow_capacity (name, holder, run_id, state, queued_at) "
            "VALUES (?, ?, ?, 'waiting', ?) ON CONFLICT (name, holder) DO UPDATE SET "
            "state = 'waiting', owner = NULL, expires_at = NULL",
            (name, holder, run_id, place),
        )

    def _arrival(self, conn: Any, holder: str, asker: _Asker, now: int) -> Any:
        """The place in the queue of a holder that joins it now (as a `queued_at` parameter):
        the queue is ordered as claims are, by arrival aged by the run's priority
        (`PRIORITY_AGING_MS`), so a high-priority call refused in the same instant as a
        backfill's, or a minute after it, is woken first. A call arrives when it asks; a run
        (`run:<id>`) at its start, as `_park` queues the backlog's runs that had not asked yet
        (the queue stays in start order whichever of them a worker claimed first). Read before
        the queue's row is written (on Citus a write of the limit's rows cannot read the runs'
        shards in a subquery)."""
        started, priority = self._exec(
            conn, "SELECT created_at, priority FROM workflow_runs WHERE id = ?", (asker.run_id,)
        ).fetchone()
        arrived = self._ms(started) if holder.startswith("run:") else now
        return self._t(aged(arrived, priority))

    def _park(
        self, conn: Any, name: str, holder: str, asker: _Asker, now: int, recheck_ms: int
    ) -> tuple[str, ...]:
        """A run of limit `name`'s backlog, or a call of it, was refused a slot: queue with it
        the due runs and calls no worker has claimed yet whose run's steps and calls take
        places of the same limit (`workflow_runs.limit_share`, written at their start), each
        released as a refused run or call is; with a call asking, also the calls its executor
        claimed with it and has not started (its run holds no place: a call of the share
        starts only with its run's place), so the executor does not ask for each of them only
        to be refused. So a big backlog leaves the claim order after a few refusals instead of
        every run or call being claimed once (and again after each `recheck_ms`) only to be
        queued, and other keys' and workflows' runs and calls are claimed meanwhile. Bounded:
        at most `PARK_PAGE` runs, and calls among the next `PARK_PAGE` due (in claim order)
        and the executor's claimed. Each parked run queues at its start time aged by its
        priority (the refused run too: `_arrival`), so the queue stays in arrival order. Read
        without locks, then the queue rows, then the run rows, then the call rows (the
        module's lock order); a run or call claimed meanwhile keeps its lease
        (its queue row is its place when it asks), a call whose run holds or is owed a slot
        is left as it is. Returns the keys of the executor's calls released here."""
        if not holder.startswith("run:"):
            return ()  # (a call site's place: the store cannot tell which calls take that limit)
        ts, reason, retry_at = self._t(now), f"{CAPACITY}: {name}", self._t(now + recheck_ms)
        runs = [
            self._id(str(r))
            for (r,) in self._exec(
                conn,
                f"SELECT id{self._TEXT_ID} FROM workflow_runs WHERE limit_share = ? AND status = "
                "'active' AND waiting_for IS NULL AND lease_owner IS NULL AND wake_at <= ? AND "
                "id <> ? ORDER BY created_at LIMIT ?",
                (name, ts, asker.run_id, PARK_PAGE),
            ).fetchall()
        ]
        calls = self._calls_to_park(conn, name, asker, ts, reason)
        if not runs and not calls:
            return ()
        ids = list(dict.fromkeys([*runs, *(self._id(r) for r, _, _ in calls)]))
        marks = ",".join("?" * len(ids))
        self._exec(
            conn,
            "INSERT INTO workflow_capacity (name, holder, run_id, state, queued_at) "
            f"SELECT ?, 'run:' || id{self._TEXT_ID}, id, 'waiting', "
            f"{self._AGED.format(time='created_at')} FROM workflow_runs WHERE id IN ({marks}) "
            "ORDER BY created_at ON CONFLICT (name, holder) DO NOTHING",
            (name, *ids),
        )
        if runs:
            self._exec(
                conn,
                "UPDATE workflow_runs SET waiting_for = ?, wake_at = ? WHERE id IN "
                f"({','.join('?' * len(runs))}) AND status = 'active' AND lease_owner IS NULL "
                "AND waiting_for IS NULL",
                (reason, retry_at, *runs),
            )
        if not calls:
            return ()
        # (the calls whose run's place is still waiting, locked in PostgreSQL: a slot reserved
        # for one meanwhile wakes its call after this, never before)
        waiting = self._run_places(conn, name, calls, "= 'waiting'" + self._SKIP_LOCKED)
        parked = [(k, claimed) for r, k, claimed in calls if f"run:{r}" in waiting]
        due = [k for k, claimed in parked if not claimed]
        if due:
            self._exec(
                conn,
                "UPDATE workflow_calls SET waiting_for = ?, available_at = ?, updated_at = ? "
                f"WHERE idempotency_key IN ({','.join('?' * len(due))}) AND status = 'pending'",
                (reason, retry_at, ts, *due),
            )
        mine = [k for k, claimed in parked if claimed]
        if not mine:
            return ()
        taken_back = self._exec(
            conn,
            "UPDATE workflow_calls SET status = 'pending', owner = NULL, lease_expires_at = NULL, "
            "attempt = attempt - 1, available_at = ?, waiting_for = ?, updated_at = ? WHERE "
            f"idempotency_key IN ({','.join('?' * len(mine))}) AND owner = ? AND status = "
            "'running' RETURNING run_id, idempotency_key",
            (retry_at, reason, ts, *mine, asker.owner),
        ).fetchall()
        self._forget_attempts(conn, taken_back)
        return tuple(str(k) for _, k in taken_back)

    def _claimed_at(self, conn: Any, asker: _Asker) -> Any:
        """When the asking call's open attempt began: the time of the claim that took it (read
        by the call's run and key, so that on Citus it is one shard's join)."""
        row = self._exec(
            conn,
            "SELECT s.started_at FROM workflow_call_attempts s JOIN workflow_calls o ON "
            "o.run_id = s.run_id AND o.idempotency_key = s.idempotency_key AND o.attempt = "
            "s.attempt WHERE o.run_id = ? AND o.idempotency_key = ?",
            (asker.run_id, asker.call),
        ).fetchone()
        return None if row is None else row[0]

    def _calls_to_park(
        self, conn: Any, name: str, asker: _Asker, ts: Any, reason: str
    ) -> list[tuple[str, str, bool]]:
        """(run, key, claimed by the asking executor) of the calls `_park` queues: among the
        next `PARK_PAGE` due pending calls (the due index in claim order, never every pending
        call) and, when a call asks, the calls its executor has claimed, those of runs of
        share `name` other than the asker's whose run holds no place of it and that wait for
        nothing else. The executor's are those of the asker's own claim (the same claim time):
        it asks for them in order after the asker's, so none was started (a call it started
        earlier, whose slot a lapsed lease requeued, is never released here to run twice).
        Read without locks (the writes check again), each statement by keys
        or by one index, so that no planner's guess (stale statistics) reads more."""
        keys = [
            str(k)
            for (k,) in self._exec(
                conn,
                "SELECT idempotency_key FROM workflow_calls WHERE status = 'pending' AND "
                "available_at <= ? ORDER BY available_at LIMIT ?",
                (ts, PARK_PAGE),
            ).fetchall()
        ]
        if asker.call is not None:  # (claimed in the asker's claim: not started, not asked)
            keys += [
                str(k)
                for (k,) in self._exec(
                    conn,
                    "SELECT c.idempotency_key FROM workflow_calls c JOIN workflow_call_attempts a "
                    "ON a.run_id = c.run_id AND a.idempotency_key = c.idempotency_key AND "
                    "a.attempt = c.attempt WHERE c.status = 'running' AND c.owner = ? AND "
                    "c.idempotency_key <> ? AND a.outcome IS NULL AND a.started_at = ? LIMIT ?",
                    (asker.owner, asker.call, self._claimed_at(conn, asker), PARK_PAGE),
                ).fetchall()
            ]
        if not keys:
            return []
        found = self._exec(
            conn,
            f"SELECT c.run_id{self._TEXT_ID}, c.idempotency_key, c.status, c.waiting_for, "
            "r.limit_share, r.status FROM workflow_calls c JOIN workflow_runs r ON r.id = "
            f"c.run_id WHERE c.idempotency_key IN ({','.join('?' * len(keys))})",
            keys,
        ).fetchall()
        asking = str(asker.run_id)
        calls = [
            (str(r), str(k), status == "running")
            for r, k, status, waits, share, run_status in found
            if share == name
            and run_status == "active"
            and str(r) != asking
            and waits in (None, reason)
        ]
        if not calls:
            return []
        placed = self._run_places(conn, name, calls, "<> 'waiting'")
        return [c for c in calls if f"run:{c[0]}" not in placed]

    def _run_places(
        self, conn: Any, name: str, calls: list[tuple[str, str, bool]], state: str
    ) -> set[str]:
        """The holders (`run:<id>`) of limit `name`'s places of the `calls`' runs whose state
        is `state` (SQL after `state `, e.g. "= 'waiting'", with any lock clause)."""
        return {
            str(h)
            for (h,) in self._exec(
                conn,
                f"SELECT holder FROM workflow_capacity WHERE name = ? AND holder IN "
                f"({','.join('?' * len(calls))}) AND state {state}",
                (name, *[f"run:{r}" for r, _, _ in calls]),
            ).fetchall()
        }

    def _wait(
        self,
        conn: Any,
        asker: _Asker,
        reason: str,
        now: int,
        retry_at: int,
        parked: tuple[str, ...] = (),
    ) -> Grant:
        """Release the run (it waits durably, not in a thread) with `reason` on its row; with
        a call, release that call instead: pending again, due at `retry_at` (or when woken),
        `reason` on its row, and the attempt its claim opened taken back (it never started:
        waiting is no attempt). Its run is not held meanwhile: it goes on."""
        if asker.call is None:
            self._exec(
                conn,
                "UPDATE workflow_runs SET waiting_for = ?, lease_owner = NULL, "
                "lease_expires_at = NULL, wake_at = ? WHERE id = ? AND lease_owner = ?",
                (reason, self._t(retry_at), asker.run_id, asker.owner),
            )
            return Grant(False, retry_at, reason)
        taken_back = self._exec(
            conn,
            "UPDATE workflow_calls SET status = 'pending', owner = NULL, lease_expires_at = NULL, "
            "attempt = attempt - 1, available_at = ?, waiting_for = ?, updated_at = ? WHERE "
            "run_id = ? AND idempotency_key = ? AND owner = ? AND status = 'running' "
            "RETURNING run_id, idempotency_key",
            (self._t(retry_at), reason, self._t(now), asker.run_id, asker.call, asker.owner),
        ).fetchall()
        self._forget_attempts(conn, taken_back)
        return Grant(False, retry_at, reason, parked)

    def _forget_attempts(self, conn: Any, calls: Sequence[tuple[Any, Any]]) -> None:
        """Delete the attempts that released calls' (run, key) claims opened: they never
        started. One statement for a burst (not a round trip per call: a refusal releases up to
        500 in its transaction, under the limit's lock); a call has one open attempt at most (a
        claim closes a lapsed one, a retry its own), and these calls' rows are locked."""
        if not calls:
            return
        runs = list(dict.fromkeys(self._id(str(r)) for r, _ in calls))
        self._exec(
            conn,
            f"DELETE FROM workflow_call_attempts WHERE run_id IN ({','.join('?' * len(runs))}) "
            f"AND idempotency_key IN ({','.join('?' * len(calls))}) AND outcome IS NULL",
            (*runs, *[str(k) for _, k in calls]),
        )


@dataclass(frozen=True, slots=True)
class _Asker:
    """Who asks for a place: run `run_id` (as a parameter) leased by `owner`, or, with
    `call`, that call of the run, leased by `owner` (a call executor)."""

    run_id: Any
    owner: str
    call: str | None


class _Unanswered(Exception):
    """Internal: a grant's fast path may have locked a slot's row without answering; roll its
    transaction back and ask under the limit's lock in a new one (the module's lock order)."""
