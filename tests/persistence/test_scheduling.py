"""Scheduled starts (cron-like) and "one run at a time", on every store."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from persistence.runtime import Runtime
from persistence.scheduling import (
    OUTSIDE_WINDOW,
    Cron,
    CronError,
    ScheduledStart,
    start_exclusive,
)
from persistence.stores import MAX_STORED_KEY_BYTES, Store
from persistence.worker import Worker
from statecharts import SimulatedClock
from tests.persistence.workflows import approval

StoreFactory = Callable[[], Store]
DAY_MS = 86_400_000


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("0 9 * * 1-5", "2026-11-27T10:00:00", "2026-11-30T09:00:00"),  # Fri -> Mon
        ("*/15 * * * *", "2026-11-30T10:07:30", "2026-11-30T10:15:00"),
        ("*/15 * * * *", "2026-11-30T10:15:00", "2026-11-30T10:30:00"),  # strictly after
        ("30 2 1 * *", "2026-11-30T00:00:00", "2026-12-01T02:30:00"),
        ("0 0 13 * 5", "2026-11-30T00:00:00", "2026-12-04T00:00:00"),  # 13th OR Friday
        ("0 12 29 2 *", "2026-03-01T00:00:00", "2028-02-29T12:00:00"),  # leap day
        ("0 0 * * 7", "2026-11-30T00:00:00", "2026-12-06T00:00:00"),  # 7 is Sunday too
    ],
)
def test_cron_next_fire_time(expression: str, after: str, expected: str) -> None:
    assert Cron.parse(expression).next_after(ms(after)) == ms(expected)


def test_cron_in_a_time_zone() -> None:
    # 09:00 in Berlin is 08:00 UTC in winter
    assert Cron.parse("0 9 * * *").next_after(ms("2026-11-30T00:00:00"), "Europe/Berlin") == ms(
        "2026-11-30T08:00:00"
    )


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("* * * *", "expected 5 fields"),
        ("61 * * * *", "minute field '61'"),
        ("* x * * *", "hour field 'x'"),
        ("* * 0 * *", "day of month field '0'"),
        ("*/0 * * * *", "minute field"),
        ("0 0 31 2 *", "never fires"),
    ],
)
def test_bad_cron_is_refused_naming_the_field(expression: str, message: str) -> None:
    with pytest.raises(CronError, match=message):
        Cron.parse(expression).next_after(0)


def test_each_slot_starts_exactly_one_run_across_racing_workers(
    store_factory: StoreFactory,
) -> None:
    clock = SimulatedClock(ms("2026-11-30T08:59:30"))
    runtimes = [Runtime(store_factory(), [approval], clock=clock) for _ in range(3)]
    schedules = [
        ScheduledStart(
            r, "morning", "approval", "0 9 * * *", overlap="allow_all", catchup_window_ms=DAY_MS
        )
        for r in runtimes
    ]
    assert [s.tick() for s in schedules] == [None, None, None]
    clock.set(ms("2026-11-30T09:00:10"))
    started: list[str | None] = []
    threads = [threading.Thread(target=lambda s=s: started.append(s.tick())) for s in schedules]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    run_ids = [r for r in started if r is not None]
    assert len(run_ids) == 1
    run = runtimes[0].get(run_ids[0])
    assert run.key == f"morning@{ms('2026-11-30T09:00:00')}"
    assert [s.tick() for s in schedules] == [None, None, None]
    # three days without any worker: the slot within the day's catch-up window fires, once;
    # the two older ones are skipped, and recorded
    clock.set(ms("2026-12-03T12:00:00"))
    assert schedules[1].tick() is not None
    assert schedules[2].tick() is None
    keys = sorted(r.key or "" for r in runtimes[0].list())
    assert keys == [f"morning@{ms('2026-11-30T09:00:00')}", f"morning@{ms('2026-12-03T09:00:00')}"]
    record = runtimes[0].store.get_schedule("morning")
    assert record is not None and record.skipped_count == 2
    assert [(r["first"], r["last"], r["count"], r["reason"]) for r in record.skipped] == [
        (ms("2026-12-01T09:00:00"), ms("2026-12-02T09:00:00"), 2, OUTSIDE_WINDOW)
    ]


def test_a_schedule_whose_run_keys_would_be_too_long_is_refused_when_defined(store: Store) -> None:
    runtime = Runtime(store, [approval])
    longest = "s" * (MAX_STORED_KEY_BYTES - len("@253402300799999"))
    ScheduledStart(runtime, longest, "approval", "0 9 * * *")
    with pytest.raises(
        ValueError,
        match=r"schedule name: its runs' keys \(<name>@<fire time>\) "
        r"would be too long: .* is 1001 bytes",
    ):
        ScheduledStart(runtime, longest + "s", "approval", "0 9 * * *")


def test_first_tick_fires_only_a_slot_within_the_grace_period(store: Store) -> None:
    clock = SimulatedClock(ms("2026-11-30T09:05:00"))
    runtime = Runtime(store, [approval], clock=clock)
    assert ScheduledStart(runtime, "late", "approval", "0 9 * * *").tick() is None
    assert ScheduledStart(runtime, "late", "approval", "0 9 * * *", grace_ms=600_000).tick()


def test_worker_ticks_schedules(store: Store) -> None:
    clock = SimulatedClock(ms("2026-11-30T09:00:00"))
    runtime = Runtime(store, [approval], clock=clock)
    schedule = ScheduledStart(runtime, "s", "approval", "* * * * *", input={"x": 1})
    Worker(runtime, schedules=[schedule]).run_until_idle()
    assert [r.key for r in runtime.list()] == [f"s@{ms('2026-11-30T09:00:00')}"]


def test_one_run_at_a_time_with_a_staleness_window(store: Store) -> None:
    clock = SimulatedClock(ms("2026-11-30T09:00:00"))
    runtime = Runtime(store, [approval], clock=clock)
    first = start_exclusive(runtime, "approval", "nightly", stale_after_ms=60_000)
    assert first is not None
    assert start_exclusive(runtime, "approval", "nightly", stale_after_ms=60_000) is None
    runtime.send(first, "APPROVE")
    Worker(runtime).run_until_idle()
    assert runtime.get(first).status == "done"
    second = start_exclusive(runtime, "approval", "nightly", stale_after_ms=60_000)
    assert second is not None and second != first  # the holder ended: the claim is free
    clock.advance(59_999)
    assert start_exclusive(runtime, "approval", "nightly", stale_after_ms=60_000) is None
    clock.advance(1)  # the second run is stuck past the window: a new one may start
    third = start_exclusive(runtime, "approval", "nightly", stale_after_ms=60_000)
    assert third is not None and third not in (first, second)
    claim = store.get_claim("nightly")
    assert claim is not None and claim.run_id == third
