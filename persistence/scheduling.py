"""Helpers for scheduled workflows: "one run at a time" and cron-like scheduled starts.

`start_exclusive` starts a run only while no other run holds the named claim; a claim whose run
has ended is free, and one not refreshed within its staleness window is taken over (so a stuck
run cannot block the schedule forever). `ScheduledStart` starts a workflow on a cron schedule;
the schedule's last fire time advances in the same transaction as the run it starts, so each slot
starts exactly one run however many workers tick it. Business-day calendars are left to the
workflow (start every weekday, let the machine skip holidays).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from persistence.runtime import Runtime
from persistence.stores import RunNotFoundError, stored_key_problem

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
    return runtime.store.try_claim(claim, holder.owner, runtime.clock.now(), stale_after_ms,
                                   run_id)  # fmt: skip


def _ended(runtime: Runtime, run_id: str | None) -> bool:
    if run_id is None:
        return False  # a starter is between claiming and starting (or died: wait for staleness)
    try:
        return runtime.store.get_run(run_id).terminal
    except RunNotFoundError:
        return True


# -- cron ----------------------------------------------------------------------------------------

_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12),
           ("day of week", 0, 7))  # fmt: skip
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
            raise CronError(f"cron {expression!r}: expected 5 fields (minute hour day month "
                            f"weekday), got {len(parts)}")  # fmt: skip
        sets = [_parse_field(p, n, lo, hi) for p, (n, lo, hi) in zip(parts, _FIELDS)]
        weekdays = frozenset(d % 7 for d in sets[4])
        return cls(expression, sets[0], sets[1], sets[2], sets[3], weekdays,
                   parts[2] == "*", parts[4] == "*")  # fmt: skip

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


class ScheduledStart:
    """Starts `workflow` at each slot of `cron`; call `tick()` periodically (workers do).

    A slot fires once in total (not once per worker). Missed slots (no worker was running) are
    not replayed one by one: the latest missed slot fires once. On the very first tick only a
    slot within `grace_ms` of now fires. `input` may be a value or `fn(fire_at_ms) -> input`;
    the run also gets the key `<name>@<fire_at_ms>`.
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
    ) -> None:
        if workflow not in runtime.machines:
            raise ValueError(f"schedule {name!r}: no workflow named {workflow!r} in the runtime")
        too_long = stored_key_problem(f"{name}@{_LATEST_SLOT}")  # refused now, not at every tick
        if too_long is not None:
            raise ValueError(f"schedule name: its runs' keys (<name>@<fire time>) would be "
                             f"too long: {too_long}")
        self.runtime, self.name, self.workflow = runtime, name, workflow
        self.cron, self.tz, self.grace_ms = Cron.parse(cron), tz, grace_ms
        ZoneInfo(tz)  # fail now on an unknown zone
        self.input = input

    def due_slot(self, now: int) -> tuple[int, int] | None:
        """(expected schedule version, slot to fire) if a slot is due at `now`."""
        record = self.runtime.store.get_schedule(self.name)
        version = record.version if record else 0
        last = record.last_fire_at if record and record.last_fire_at is not None else None
        slot = self.cron.next_after(last if last is not None else now - self.grace_ms - 1,
                                    self.tz)  # fmt: skip
        if slot > now:
            return None
        while True:  # the latest slot that is due
            following = self.cron.next_after(slot, self.tz)
            if following > now:
                return version, slot
            slot = following

    def tick(self) -> str | None:
        """Start the due slot's run if it has not been started; return its id."""
        now = self.runtime.clock.now()
        due = self.due_slot(now)
        if due is None:
            return None
        version, slot = due
        value = self.input(slot) if callable(self.input) else self.input
        key = f"{self.name}@{slot}"
        with self.runtime.telemetry.starting(self.workflow, key) as begun:  # a trace of its own
            run, outbox, effects = self.runtime.prepare_run(
                self.workflow, value, key, now, traceparent=begun.traceparent)
            children = self.runtime.child_runs(run.id, key, effects, now, run.traceparent)
            record = self.runtime.store.fire_schedule(self.name, version, slot, run, outbox, now,
                                                      children=children)  # fmt: skip
            if record is None:
                return None
            begun.run(record.id, True)
        self.runtime.telemetry.run_started(self.workflow)
        return record.id
