"""Schedules' overlap policies and catch-up window, on every store, with a simulated clock.

Each tick is made by a new runtime on a new store object of the same database (as another
worker, or the same one after a restart, would): what a schedule decided (its last run, its
buffered slot, its skipped slots) is read back from the database, never kept in memory. The
workflow is `approval`, which stays active until it is approved: the previous run is "still
running" until the test says otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from persistence.cli import main as cli_main
from persistence.runtime import Runtime
from persistence.scheduling import (
    ALREADY_BUFFERED,
    OUTSIDE_WINDOW,
    Overlap,
    ScheduledStart,
    still_running,
)
from persistence.stores import ScheduleRecord, Store, open_store
from statecharts import SimulatedClock
from tests.persistence.workflows import approval

StoreFactory = Callable[[], Store]
HOURLY = "0 * * * *"


def at(hhmm: str) -> int:
    """An instant on 30 Nov 2026 (UTC), e.g. at("09:00")."""
    return int(
        datetime.fromisoformat(f"2026-11-30T{hhmm}:00").replace(tzinfo=UTC).timestamp() * 1000
    )


class Ticker:
    """Ticks schedule "hourly" at the instants a test names, each time as a new worker."""

    def __init__(self, store_factory: StoreFactory, overlap: Overlap, **options: Any) -> None:
        self.store_factory, self.overlap, self.options = store_factory, overlap, options
        self.clock = SimulatedClock(at("08:59"))
        self.store = store_factory()

    def runtime(self) -> Runtime:
        return Runtime(self.store_factory(), [approval], clock=self.clock)

    def tick(self, hhmm: str) -> list[str]:
        """The slots (HH:MM) of the runs started by a tick at `hhmm`."""
        self.clock.set(at(hhmm))
        before = {r.id for r in self.store.list_runs(limit=100)}
        ScheduledStart(
            self.runtime(), "hourly", "approval", HOURLY, overlap=self.overlap, **self.options
        ).tick()
        new = [r for r in self.store.list_runs(limit=100) if r.id not in before]
        return sorted(slot_of(r.key) for r in new)

    def run(self, hhmm: str) -> str:
        """The id of the run of slot `hhmm`."""
        return next(r.id for r in self.store.list_runs(limit=100) if r.key == f"hourly@{at(hhmm)}")

    def status(self, hhmm: str) -> str:
        return self.store.get_run(self.run(hhmm)).status

    def approve(self, hhmm: str) -> None:
        self.runtime().send(self.run(hhmm), {"type": "APPROVE"})
        assert self.status(hhmm) == "done"

    def record(self) -> ScheduleRecord:
        record = self.store_factory().get_schedule("hourly")
        assert record is not None
        return record


def slot_of(key: str | None) -> str:
    return datetime.fromtimestamp(int(str(key).split("@")[1]) / 1000, UTC).strftime("%H:%M")


def skips(record: ScheduleRecord) -> list[tuple[str, str, int, str]]:
    return [
        (slot_of(f"@{r['first']}"), slot_of(f"@{r['last']}"), r["count"], r["reason"])
        for r in record.skipped
    ]


def test_skip_drops_a_slot_while_the_previous_run_is_still_running(
    store_factory: StoreFactory,
) -> None:
    t = Ticker(store_factory, "skip")
    assert t.tick("09:00") == ["09:00"]
    assert t.tick("10:00") == []  # 09:00's run is still waiting for its approval
    assert t.tick("10:30") == []  # (decided once: not skipped again)
    first = t.run("09:00")
    assert skips(t.record()) == [("10:00", "10:00", 1, still_running(first))]
    t.approve("09:00")
    assert t.tick("11:00") == ["11:00"]
    record = t.record()
    assert (record.skipped_count, record.last_run_id) == (1, t.run("11:00"))
    assert t.store_factory().list_schedules() == [record]


def test_buffer_one_fires_one_held_slot_once_the_previous_run_ends(
    store_factory: StoreFactory,
) -> None:
    t = Ticker(store_factory, "buffer_one")
    assert t.tick("09:00") == ["09:00"]
    assert t.tick("10:00") == []  # buffered
    assert t.record().buffered_at == at("10:00")
    assert t.tick("11:00") == []  # one slot is buffered already: this one is skipped
    assert t.tick("11:20") == []  # still running: the buffered slot waits
    t.approve("09:00")
    assert t.tick("11:30") == ["10:00"]  # the buffered slot, at once
    record = t.record()
    assert record.buffered_at is None and record.last_run_id == t.run("10:00")
    assert skips(record) == [("11:00", "11:00", 1, ALREADY_BUFFERED)]
    assert t.tick("12:00") == []  # 10:00's run is running: buffered again
    assert t.record().buffered_at == at("12:00")


def test_allow_all_fires_every_slot_whatever_runs(store_factory: StoreFactory) -> None:
    t = Ticker(store_factory, "allow_all")
    assert t.tick("09:00") == ["09:00"]
    assert t.tick("10:00") == ["10:00"]
    assert t.tick("11:00") == ["11:00"]
    assert [t.status(h) for h in ("09:00", "10:00", "11:00")] == ["active"] * 3
    assert t.record().skipped_count == 0


def test_cancel_other_cancels_the_running_run_and_fires(store_factory: StoreFactory) -> None:
    t = Ticker(store_factory, "cancel_other")
    assert t.tick("09:00") == ["09:00"]
    assert t.tick("10:00") == ["10:00"]
    assert (t.status("09:00"), t.status("10:00")) == ("cancelled", "active")
    t.approve("10:00")
    assert t.tick("11:00") == ["11:00"]  # nothing to cancel
    assert t.status("10:00") == "done"
    assert t.record().skipped_count == 0


@pytest.mark.parametrize(
    ("overlap", "fired", "skipped"),
    [
        ("allow_all", ["09:00", "13:00", "14:00", "15:00"], []),
        ("skip", ["09:00", "13:00"], [("14:00", "15:00", 2, "13:00")]),
        ("buffer_one", ["09:00", "13:00"], [("15:00", "15:00", 1, ALREADY_BUFFERED)]),
        ("cancel_other", ["09:00", "13:00", "14:00", "15:00"], []),
    ],
)
def test_a_catch_up_after_an_outage_fires_the_window_and_records_the_rest(
    store_factory: StoreFactory,
    overlap: Overlap,
    fired: list[str],
    skipped: list[tuple[str, str, int, str]],
) -> None:
    t = Ticker(store_factory, overlap, catchup_window_ms=3 * 3_600_000)
    assert t.tick("09:00") == ["09:00"]
    t.approve("09:00")
    # no worker from 09:05 to 15:30: 10:00-12:00 are older than the 3 hours' window (from
    # 12:30); 13:00-15:00 are taken in order, each by the overlap policy
    t.tick("15:30")
    assert sorted(slot_of(r.key) for r in t.store.list_runs(limit=100)) == fired
    expected = [("10:00", "12:00", 3, OUTSIDE_WINDOW)] + [
        (first, last, count, reason if reason == ALREADY_BUFFERED else still_running(t.run(reason)))
        for first, last, count, reason in skipped
    ]
    record = t.record()
    assert skips(record) == expected
    assert record.skipped_count == sum(count for _, _, count, _ in expected)
    assert t.tick("15:40") == []  # every slot up to now is decided: none fires twice
    if overlap == "cancel_other":  # each slot taken in order cancelled the one before it
        assert [t.status(h) for h in ("13:00", "14:00", "15:00")] == [
            "cancelled",
            "cancelled",
            "active",
        ]
    if overlap == "buffer_one":
        assert record.buffered_at == at("14:00")
        t.approve("13:00")
        assert t.tick("15:50") == ["14:00"]


def test_the_cli_lists_each_schedule_with_its_skips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    t = Ticker(lambda: open_store(url, migrate=True), "skip", catchup_window_ms=3 * 3_600_000)
    t.tick("09:00")
    t.approve("09:00")
    t.tick("15:30")  # 10:00-12:00 outside the window, 13:00 fires, 14:00-15:00 skipped
    assert cli_main(["schedules", "--store", url]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"hourly: decided up to 2026-11-30T15:00:00Z, last run {t.run('13:00')}, 5 slot(s) skipped",
        f"  skipped 3 slot(s) 2026-11-30T10:00:00Z .. 2026-11-30T12:00:00Z: {OUTSIDE_WINDOW}",
        f"  skipped 2 slot(s) 2026-11-30T14:00:00Z .. 2026-11-30T15:00:00Z: "
        f"{still_running(t.run('13:00'))}",
    ]
    assert cli_main(["schedules", "--store", url, "--json"]) == 0
    (listed,) = orjson.loads(capsys.readouterr().out)
    assert (listed["name"], listed["skipped_count"], listed["buffered_at"]) == ("hourly", 5, None)


def test_a_bad_overlap_or_window_is_refused_naming_the_schedule(store: Store) -> None:
    runtime = Runtime(store, [approval])
    with pytest.raises(
        ValueError,
        match="schedule 'h': overlap must be one of skip, "
        "buffer_one, allow_all, cancel_other, not 'queue'",
    ):
        ScheduledStart(runtime, "h", "approval", HOURLY, overlap="queue")  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match="schedule 'h': catchup_window_ms must be an integer >= 10000"
    ):
        ScheduledStart(runtime, "h", "approval", HOURLY, catchup_window_ms=5_000)


def test_a_slot_whose_run_lacks_its_limits_key_is_logged_and_kept(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    from persistence.capacity import Limit
    from persistence.worker import Worker

    clock = SimulatedClock(at("09:00"))
    runtime = Runtime(
        store,
        [approval],
        clock=clock,
        limits={"per_tenant": Limit(max_in_flight=1, key="tenant")},
        workflow_limits={"approval": "per_tenant"},
    )
    schedule = ScheduledStart(runtime, "hourly", "approval", HOURLY, input={"no": "tenant"})
    Worker(runtime, schedules=[schedule]).run_until_idle()  # logged, not raised
    assert (
        "schedule hourly: tick failed: limit 'per_tenant' is per key context.tenant" in caplog.text
    )
    assert store.get_schedule("hourly") is None and store.list_runs(limit=10) == []
