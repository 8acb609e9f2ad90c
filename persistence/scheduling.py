"""Helpers for scheduled workflows: "one run at a time" and cron-like scheduled starts.

`start_exclusive` starts a run only while no other run holds the named claim; a claim whose run
has ended is free, and one not refreshed within its staleness window is taken over (so a stuck
run cannot block the schedule forever). `ScheduledStart` starts a workflow on a cron schedule;
the schedule's last fire time advances in the same transaction as the run it starts, so each slot
starts exactly one run however many workers tick it. A slot that comes while the schedule's last
run is still active follows the schedule's overlap policy (skip, buffer one, allow all, cancel
the other), and after downtime the missed slots within its catch-up window are taken in order
(older ones skipped); every skip is recorded on the schedule. Business-day calendars are left to the
workflow (start every weekday, let the machine skip holidays).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo

from persistence.runtime import Runtime
from persistence.stores import RunNotFoundError, ScheduleRecord, stored_key_problem

log = logging.getLogger("statecharts.schedules")

# -- one run at a time -------------------------------------------------------------------------


def start_exclusive(
    runtime: Runtime,
    workflow: str,
    claim: str,
    *,
    input: Any = None,
    stale_after_ms: int = 3_600_000,
) -> str | None:
    """Start `workflow` unless another run holds claim `claim`; return the new run id or None.

    The claim is free when nobody holds it, when the holder's run has ended, or when it was not
    refreshed for `stale_after_ms` (call `refresh_exclusive` from a long run to keep it).
    """
    store, now = runtime.store, runtime.clock.now()
    token = f"claim:{uuid.uuid4()}"
    if not store.try_claim(claim, token, now, stale_after_ms):
        holder = store.get_claim(claim)
        if holder is None or not _ended(runtime, holder.run_id):
            return None
        store.release_claim(claim, holder.owner)
        if not store.try_claim(claim, token, now, stale_after_ms):
            return None  # another starter won the race for the freed claim
    try:
        run_id = runtime.start(workflow, input)
    except BaseException:
        store.release_claim(claim, token)
        raise
    store.try_claim(claim, token, now, stale_after_ms, run_id)
    return run_id


def refresh_exclusive(runtime: Runtime, claim: str, run_id: str, stale_after_ms: int) -> bool:
    """Extend the claim held for `run_id` (False if it is no longer that run's)."""
    holder = runtime.store.get_claim(claim)
    if holder is None or holder.run_id != run_id:
        return False
    return runtime.store.try_claim(claim, holder.owner, runtime.clock.now(), stale_after_ms, run_id)


def _ended(runtime: Runtime, run_id: str | None) -> bool:
    if run_id is None:
        return False  # a starter is between claiming and starting (or died: wait for staleness)
    try:
        return runtime.store.get_run(run_id).terminal
    except RunNotFoundError:
        return True


# -- cron ----------------------------------------------------------------------------------------

_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
)
_MAX_SEARCH_DAYS = 366 * 5


class CronError(ValueError):
    """A cron expression that cannot be parsed; the message names the field."""


def _parse_field(text: str, name: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if body == "*":
                start, end = low, high
            elif "-" in body:
                a, b = body.split("-", 1)
                start, end = int(a), int(b)
            else:
                start = end = int(body)
        except ValueError as exc:
            raise CronError(f"cron {name} field {text!r}: not a number, range or */step") from exc
        if step < 1 or not (low <= start <= end <= high):
            raise CronError(f"cron {name} field {text!r}: must be within {low}-{high}")
        values.update(range(start, end + 1, step))
    return frozenset(values)


@dataclass(frozen=True)
class Cron:
    """A five-field cron expression: minute hour day-of-month month day-of-week (0/7 = Sunday).

    As in cron, when both day fields are restricted a day matching either one fires.
    """

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    any_day: bool
    any_weekday: bool

    @classmethod
    def parse(cls, expression: str) -> Cron:
        """Parse `expression`, raising `CronError` that names the bad field."""
        parts = expression.split()
        if len(parts) != 5:
            raise CronError(
                f"cron {expression!r}: expected 5 fields (minute hour day month "
                f"weekday), got {len(parts)}"
            )
        sets = [_parse_field(p, n, lo, hi) for p, (n, lo, hi) in zip(parts, _FIELDS)]
        weekdays = frozenset(d % 7 for d in sets[4])
        return cls(
            expression,
            sets[0],
            sets[1],
            sets[2],
            sets[3],
            weekdays,
            parts[2] == "*",
            parts[4] == "*",
        )

    def _day_matches(self, day: datetime) -> bool:
        if day.month not in self.months:
            return False
        in_month, in_week = day.day in self.days, (day.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return in_month and in_week
        return in_month or in_week

    def next_after(self, after_ms: int, tz: str = "UTC") -> int:
        """The first fire time strictly after `after_ms` (epoch ms), in time zone `tz`."""
        zone = ZoneInfo(tz)
        start = datetime.fromtimestamp(after_ms / 1000, zone).replace(second=0, microsecond=0)
        day = start.replace(hour=0, minute=0)
        for _ in range(_MAX_SEARCH_DAYS):
            if self._day_matches(day):
                for hour in sorted(self.hours):
                    for minute in sorted(self.minutes):
                        local = day.replace(hour=hour, minute=minute)
                        moment = int(local.astimezone(UTC).timestamp() * 1000)
                        if moment > after_ms:
                            return moment
            day = (day + timedelta(days=1)).replace(hour=0, minute=0)
        raise CronError(f"cron {self.expression!r} never fires")


_LATEST_SLOT = 253_402_300_799_999
"""The last millisecond of year 9999: the longest fire time in a scheduled run's key."""

Overlap = Literal["skip", "buffer_one", "allow_all", "cancel_other"]
"""What a slot does while the schedule's previous run is still active (Temporal's
ScheduleOverlapPolicy): `skip` it (recorded); `buffer_one`: fire it once that run ends (one slot
is buffered, later ones are skipped); `allow_all`: fire it anyway; `cancel_other`: cancel that
run (`Runtime.cancel`) and fire."""
OVERLAPS: tuple[Overlap, ...] = ("skip", "buffer_one", "allow_all", "cancel_other")
YEAR_MS = 365 * 24 * 3_600_000
MIN_CATCHUP_MS = 10_000
"""The shortest catch-up window (as Temporal's): a worker ticks a little after a slot, and a
slot later than the window is skipped, so a shorter window would skip slots of a live fleet."""
SLOTS_PER_PASS = 1000
"""How many slots one pass of a tick decides at most (a pass is one transaction)."""
PASSES_PER_TICK = 20
"""How many passes one tick makes at most (a catch-up longer than that goes on next tick)."""
OUTSIDE_WINDOW = "missed while no worker ran, outside the catch-up window"
ALREADY_BUFFERED = "a slot was buffered already (overlap buffer_one)"


def still_running(run_id: str) -> str:
    """Why a slot is skipped while the schedule's previous run is active (overlap skip)."""
    return f"the previous run {run_id} was still running (overlap skip)"


def iso(ms: int) -> str:
    """An epoch-ms instant as UTC ISO 8601 to the second (for logs)."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Pass:
    """What one pass of a tick decided: slots up to `decided_to` (skip records `skipped`, a
    slot `buffered`), then the slot `fire` to start (if any), cancelling `cancel` first."""

    decided_to: int
    buffered: int | None
    skipped: list[dict[str, Any]] = field(default_factory=list)
    fire: int | None = None
    cancel: str | None = None

    def skip(self, slot: int, reason: str, now: int) -> None:
        """Record `slot` as skipped, with the records of consecutive slots merged."""
        last = self.skipped[-1] if self.skipped else None
        if last is not None and last["reason"] == reason:
            last["last"], last["count"] = slot, last["count"] + 1
        else:
            self.skipped.append(
                {"first": slot, "last": slot, "count": 1, "reason": reason, "at": now}
            )


class ScheduledStart:
    """Starts `workflow` at each slot of `cron`; call `tick()` periodically (workers do).

    A slot fires once in total (not once per worker). While the run the schedule started last
    is active, a new slot follows `overlap` (`Overlap`; `skip` by default, as Temporal). After
    downtime (no worker ticked), the missed slots within `catchup_window_ms` of now (a year by
    default) are taken in order, each by the overlap policy; older ones are skipped. Every
    skipped slot is recorded on the schedule (`ScheduleRecord.skipped`) and logged. On the very
    first tick only a slot within `grace_ms` of now fires. `input` may be a value or
    `fn(fire_at_ms) -> input`; the run also gets the key `<name>@<fire_at_ms>`.
    """

    def __init__(
        self,
        runtime: Runtime,
        name: str,
        workflow: str,
        cron: str,
        *,
        input: Any = None,
        tz: str = "UTC",
        grace_ms: int = 60_000,
        overlap: Overlap = "skip",
        catchup_window_ms: int = YEAR_MS,
    ) -> None:
        if workflow not in runtime.machines:
            raise ValueError(f"schedule {name!r}: no workflow named {workflow!r} in the runtime")
        too_long = stored_key_problem(f"{name}@{_LATEST_SLOT}")  # refused now, not at every tick
        if too_long is not None:
            raise ValueError(
                f"schedule name: its runs' keys (<name>@<fire time>) would be too long: {too_long}"
            )
        if overlap not in OVERLAPS:
            raise ValueError(
                f"schedule {name!r}: overlap must be one of {', '.join(OVERLAPS)}, not {overlap!r}"
            )
        if not isinstance(catchup_window_ms, int) or catchup_window_ms < MIN_CATCHUP_MS:
            raise ValueError(
                f"schedule {name!r}: catchup_window_ms must be an integer >= "
                f"{MIN_CATCHUP_MS} (a tick comes a little after its slot), not "
                f"{catchup_window_ms!r}"
            )
        self.runtime, self.name, self.workflow = runtime, name, workflow
        self.cron, self.tz, self.grace_ms = Cron.parse(cron), tz, grace_ms
        self.overlap, self.catchup_window_ms = overlap, catchup_window_ms
        ZoneInfo(tz)  # fail now on an unknown zone
        self.input = input

    def tick(self) -> str | None:
        """Decide every due slot (by the overlap policy and the catch-up window) and start the
        runs of those that fire; return the id of the last run started, if any."""
        started: str | None = None
        for _ in range(PASSES_PER_TICK):
            record = self.runtime.store.get_schedule(self.name)
            now = self.runtime.clock.now()
            decided = self._decide(record, now)
            if decided is None:
                break
            version = record.version if record else 0
            if decided.cancel is not None:
                self.runtime.cancel(
                    decided.cancel,
                    f"schedule {self.name}: the slot {decided.fire} fired (overlap cancel_other)",
                )
            if decided.fire is None:
                if not self.runtime.store.skip_schedule(
                    self.name,
                    version,
                    decided.decided_to,
                    now,
                    buffered_at=decided.buffered,
                    skipped=decided.skipped,
                ):
                    break  # another worker decided these slots
            else:
                run_id = self._fire(decided, version, now)
                if run_id is None:
                    break
                started = run_id
            for skip in decided.skipped:
                log.info(
                    "schedule %s: skipped %d slot(s) %s .. %s: %s",
                    self.name,
                    skip["count"],
                    iso(skip["first"]),
                    iso(skip["last"]),
                    skip["reason"],
                )
        return started

    def _decide(self, record: ScheduleRecord | None, now: int) -> _Pass | None:
        """The next pass: the slots due at `now` after those decided, up to and including the
        first that fires; None when nothing is due (and no buffered slot may fire)."""
        last = record.last_fire_at if record else None
        buffered = record.buffered_at if record else None
        previous = record.last_run_id if record else None
        running = previous is not None and self._active(previous)
        start = last if last is not None else self._first_start(now)
        if buffered is not None and not running:  # its turn: the run it waited for ended
            return _Pass(start, None, fire=buffered)
        decided = _Pass(start, buffered)
        window_starts = now - self.catchup_window_ms
        for _ in range(SLOTS_PER_PASS):
            slot = self.cron.next_after(decided.decided_to, self.tz)
            if slot > now:
                break
            decided.decided_to = slot
            if slot < window_starts:
                decided.skip(slot, OUTSIDE_WINDOW, now)
            elif not running or self.overlap == "allow_all":
                decided.fire = slot
                break
            elif self.overlap == "cancel_other":
                decided.fire, decided.cancel = slot, previous
                break
            elif self.overlap == "buffer_one" and decided.buffered is None:
                decided.buffered = slot
            elif self.overlap == "buffer_one":
                decided.skip(slot, ALREADY_BUFFERED, now)
            else:
                decided.skip(slot, still_running(str(previous)), now)
        if decided.decided_to == start and decided.fire is None:
            return None
        return decided

    def _first_start(self, now: int) -> int:
        """Where a schedule that never fired starts deciding: just before the latest slot
        within `grace_ms` of now (earlier slots were before its time, not missed)."""
        slot = self.cron.next_after(now - self.grace_ms - 1, self.tz)
        for _ in range(SLOTS_PER_PASS):
            following = self.cron.next_after(slot, self.tz)
            if following > now:
                break
            slot = following
        return slot - 1

    def _active(self, run_id: str) -> bool:
        try:
            return not self.runtime.store.get_run(run_id).terminal
        except RunNotFoundError:
            return False

    def _fire(self, decided: _Pass, version: int, now: int) -> str | None:
        """Start the run of slot `decided.fire` with the pass's decisions, in one transaction."""
        slot = decided.fire
        assert slot is not None
        value = self.input(slot) if callable(self.input) else self.input
        key = f"{self.name}@{slot}"
        calls = self.runtime.local_calls  # (a worker ticks it: its executor takes the calls)
        with self.runtime.telemetry.starting(self.workflow, key) as begun:  # a trace of its own
            run, outbox, effects = self.runtime.prepare_run(
                self.workflow, value, key, now, traceparent=begun.traceparent, calls=calls
            )
            children = self.runtime.child_runs(run.id, key, effects, now, run.traceparent)
            record = self.runtime.store.fire_schedule(
                self.name,
                version,
                decided.decided_to,
                run,
                outbox,
                now,
                children=children,
                buffered_at=decided.buffered,
                skipped=decided.skipped,
            )
            if record is None:
                return None
            begun.run(record.id, True)
        self.runtime.inserted(run, record, outbox, effects, now, calls=calls)
        return record.id
