"""Holidays and cadences load from a file through the command line; ``statecharts worker
--schedules`` fires the follow-up crons."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from machines.fakes import FakeWorld
from machines.followup import build_machines, repository
from machines.followup.__main__ import main
from machines.followup.business_days import MAX_OFFSET
from machines.followup.db import Database
from persistence import open_store
from persistence.cli import load_schedules
from persistence.runtime import Runtime
from persistence.worker import Worker
from statecharts import SimulatedClock
from tests.machines.conftest import make_services

CALENDAR = """
[holidays]
2026-04-03 = "Good Friday"
2026-04-06 = "Easter Monday"

[cadences]
default = [2, 4]
slow = [10, 20, 30]
"""


def test_holidays_and_cadences_load_from_a_file_and_shape_new_watches(
    any_db: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "calendar.toml"
    path.write_text(CALENDAR)
    assert main(["holidays", "load", str(path), "--database", any_db.url]) == 0
    assert main(["cadences", "load", str(path), "--database", any_db.url]) == 0
    out = capsys.readouterr().out
    assert "loaded 2 holidays" in out and "loaded 2 cadences" in out
    with any_db.transaction() as tx:
        assert repository.holidays(tx) == {date(2026, 4, 3), date(2026, 4, 6)}
        assert repository.cadence_offsets(tx, "slow") == [10, 20, 30]
        repository.register_watch(tx, "deal", "D1", "Acme", "default", date(2026, 4, 2), 0)
        dues = [r["due_on"] for r in tx.rows("select due_on from watch_steps order by step")]
    assert dues == ["2026-04-08", "2026-04-10"], "Good Friday and Easter Monday skipped"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[holidays]\n2026-12-25 = "Christmas"\n2026-02-30 = "Nope"\n',
            "holidays.2026-02-30: not a date",
        ),
        (
            '[holidays]\n2026-12-25 = "Christmas"\n2026-05-01 = ""\n',
            "holidays.2026-05-01: the holiday's name",
        ),
        ("[cadences]\ndefault = [5, 3]\n", "cadences.default: a list of increasing positive"),
        (
            "[cadences]\ndefault = [5, 1000000000000000000000000000000]\n",
            "cadences.default: offsets are at most 2610 business days (ten years), not 10000",
        ),
        ("[cadence]\ndefault = [5]\n", "unknown table(s) ['cadence']"),
        ("[holidays\n", "calendar.toml"),
    ],
)
def test_a_bad_calendar_file_names_the_key_and_loads_nothing(
    db: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "calendar.toml"
    path.write_text(text)
    assert main(["holidays", "load", str(path), "--database", db.url]) == 1
    assert message in capsys.readouterr().err
    with db.transaction() as tx:
        assert repository.holidays(tx) == set()


def test_a_cadence_offset_beyond_ten_years_is_refused_at_load_not_at_the_first_watch(
    any_db: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "calendar.toml"
    path.write_text(f"[cadences]\nlongest = [{MAX_OFFSET}]\nhuge = [5, {10**30}]\n")
    assert main(["cadences", "load", str(path), "--database", any_db.url]) == 1
    assert f"{path}: cadences.huge: offsets are at most 2610" in capsys.readouterr().err
    path.write_text(f"[cadences]\nlongest = [{MAX_OFFSET}]\n")
    assert main(["cadences", "load", str(path), "--database", any_db.url]) == 0
    with any_db.transaction() as tx:
        assert "huge" not in {r["name"] for r in tx.rows("select name from cadences")}
        repository.register_watch(tx, "deal", "D1", "Acme", "longest", date(2026, 4, 2), 0)
        assert [r["due_on"] for r in tx.rows("select due_on from watch_steps")] == ["2036-04-03"]


def test_the_worker_command_fires_the_followup_schedules(
    db: Database, world: FakeWorld, tmp_path: Path
) -> None:
    services = make_services(db, world)
    monday_ten = int(datetime(2026, 3, 2, 10, 0, 20, tzinfo=UTC).timestamp() * 1000)
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}", migrate=True)
    runtime = Runtime(
        store, list(build_machines(services).values()), clock=SimulatedClock(monday_ten)
    )
    starts = load_schedules(["machines.followup.schedules"], runtime)
    assert sorted(s.name for s in starts) == [
        "followup_digest",
        "followup_enrich",
        "followup_evaluate",
        "followup_morning_list",
    ]
    Worker(runtime, schedules=starts).run_until_idle()
    [run] = runtime.list(name="followup_evaluate")
    slot = monday_ten - 20_000
    assert run.key == f"followup_evaluate@{slot}" and run.status == "done"
    with db.transaction() as tx:
        assert [r["run_key"] for r in repository.run_log(tx, "followup_evaluate")] == [run.key]
    store.close()


def test_the_worker_command_refuses_a_bad_schedules_module(tmp_path: Path) -> None:
    open_store(f"sqlite:///{tmp_path / 'runs.db'}", migrate=True).close()
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "statecharts"),
            "worker",
            "--store",
            f"sqlite:///{tmp_path / 'runs.db'}",
            "--machines",
            "machines.invoice",
            "--schedules",
            "machines.followup.schedules:nothing",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert (
        "--schedules machines.followup.schedules:nothing: machines.followup.schedules "
        "has no 'nothing'" in result.stderr
    )


def test_the_example_calendar_file_loads(db: Database) -> None:
    path = Path(__file__).resolve().parents[2] / "machines/followup/calendar.example.toml"
    assert main(["holidays", "load", str(path), "--database", db.url]) == 0
    assert main(["cadences", "load", str(path), "--database", db.url]) == 0
    with db.transaction() as tx:
        assert date(2026, 4, 3) in repository.holidays(tx)
        assert repository.cadence_offsets(tx, "default") == [5, 12, 21]
