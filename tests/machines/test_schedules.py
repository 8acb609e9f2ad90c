"""The follow-up schedules fire the right workflows at the right slots, each slot once."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from machines.fakes import FakeWorld
from machines.followup import build_machines
from machines.followup.db import Database
from machines.followup.schedules import schedules
from persistence import open_store
from persistence.runtime import Runtime
from persistence.worker import Worker
from statecharts import SimulatedClock
from tests.machines.conftest import make_services


def at(day: int, hour: int, minute: int = 0) -> int:
    return int(datetime(2026, 3, day, hour, minute, tzinfo=UTC).timestamp() * 1000)


def test_a_friday_fires_evaluate_hourly_enrich_at_half_past_and_both_reports(
    db: Database, world: FakeWorld, tmp_path: Path
) -> None:
    services = make_services(db, world)
    clock = SimulatedClock(at(6, 7, 59))  # Friday 6 March 2026
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}", migrate=True)
    runtime = Runtime(store, list(build_machines(services).values()), clock=clock)
    worker = Worker(runtime, schedules=schedules(runtime))
    fired: list[tuple[str, str]] = []
    while clock.now() < at(6, 18):
        clock.set(clock.now() + 60_000)
        worker.run_until_idle()
        worker.run_until_idle()  # a second tick in the same minute starts nothing
    for run in reversed(store.list_runs(limit=1000)):
        context = runtime.snapshot(run.id).context
        fired.append(
            (
                run.workflow_name,
                datetime.fromtimestamp(context["now"] / 1000, UTC).strftime("%H:%M"),
            )
        )
    evaluates = [t for name, t in fired if name == "followup_evaluate"]
    enriches = [t for name, t in fired if name == "followup_enrich"]
    reports = [t for name, t in fired if name == "followup_report"]
    assert evaluates == [f"{h:02d}:00" for h in range(9, 18)]
    assert enriches == [f"{h:02d}:30" for h in range(8, 18)]
    assert reports == ["08:00", "17:30"]
    assert all(run.status == "done" for run in store.list_runs(limit=1000))
    store.close()
