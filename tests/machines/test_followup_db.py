"""The follow-up database on SQLite and PostgreSQL: migrations, the one-open-watch index, the
run claim with its staleness window, and errors that name the database as the failure class."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from machines.followup import repository
from machines.followup.db import Database, DatabaseError

MONDAY = date(2026, 3, 2)
MINUTE = 60_000


def test_migrations_apply_once(any_db: Database) -> None:
    assert any_db.migrate() == [], "already applied by the fixture"
    with any_db.transaction() as tx:
        assert repository.cadence_offsets(tx, "default") == [5, 12, 21]
        names = [r["name"] for r in tx.rows("select name from followup_migrations")]
    assert names == ["001_initial.sql"]


def test_register_schedules_steps_by_business_days_and_holidays(any_db: Database) -> None:
    with any_db.transaction() as tx:
        repository.add_holiday(tx, date(2026, 3, 9), "Founders' day")
        watch_id, created = repository.register_watch(
            tx, "deal", "D1", "Acme", "default", MONDAY, 0
        )
        steps = tx.rows(
            "select step, due_on, status from watch_steps where watch_id = ? order by step",
            (watch_id,),
        )
    assert created
    assert steps == [
        {"step": 1, "due_on": "2026-03-10", "status": "pending"},
        {"step": 2, "due_on": "2026-03-19", "status": "pending"},
        {"step": 3, "due_on": "2026-04-01", "status": "pending"},
    ]


def test_one_open_watch_per_subject(any_db: Database) -> None:
    with any_db.transaction() as tx:
        first, created = repository.register_watch(tx, "deal", "D1", "Acme", "default", MONDAY, 0)
    with any_db.transaction() as tx:
        again, created_again = repository.register_watch(
            tx, "deal", "D1", "Acme", "default", date(2026, 3, 20), 1
        )
        dues = [r["due_on"] for r in tx.rows("select due_on from watch_steps order by step")]
    assert (again, created_again) == (first, False)
    assert dues[0] == "2026-03-09", "the running cadence was not reset"
    with any_db.transaction() as tx:
        assert repository.close_watch(tx, "deal", "D1", "won", 2)
        assert not repository.close_watch(tx, "deal", "D1", "won", 3)
        reopened, created = repository.register_watch(
            tx, "deal", "D1", "Acme", "default", date(2026, 4, 1), 4
        )
        pending_of_first = tx.rows("select status from watch_steps where watch_id = ?", (first,))
    assert created and reopened != first, "a closed watch does not block a new one"
    assert {r["status"] for r in pending_of_first} == {"skipped"}
    with pytest.raises(DatabaseError), any_db.transaction() as tx:
        tx.execute(
            "insert into watches (subject_type, subject_id, subject_name, cadence, "
            "opened_on, opened_at) values ('deal', 'D1', 'Acme', 'default', ?, 0)",
            ("2026-04-02",),
        )


def test_claim_is_held_by_one_run_until_released_or_stale(any_db: Database) -> None:
    stale = 30 * MINUTE

    def granted(workflow: str, key: str, now: int) -> bool:
        return bool(repository.claim_run(tx, workflow, key, now, stale)["granted"])

    with any_db.transaction() as tx:
        assert granted("evaluate", "run-a", 0)
        assert granted("evaluate", "run-a", MINUTE), "same run again"
        blocked = repository.claim_run(tx, "evaluate", "run-b", 10 * MINUTE, stale)
        assert blocked == {
            "granted": False,
            "holder": {"run_key": "run-a", "started_at": 0},
            "abandoned": [],
        }
        assert granted("other workflow", "run-b", 10 * MINUTE)
    with any_db.transaction() as tx:
        repository.finish_run(tx, "evaluate", "run-a", "ok", {"created": 0}, 11 * MINUTE)
        assert granted("evaluate", "run-c", 12 * MINUTE)
        assert not granted("evaluate", "run-a", 13 * MINUTE), "a finished run cannot claim again"
        took_over = repository.claim_run(tx, "evaluate", "run-d", 12 * MINUTE + stale + 1, stale)
        assert took_over["granted"] and took_over["abandoned"] == ["run-c"]
        log = {r["run_key"]: r["status"] for r in repository.run_log(tx, "evaluate")}
    assert log == {"run-a": "ok", "run-c": "abandoned", "run-d": "running"}


def test_errors_roll_back_and_are_database_errors(any_db: Database) -> None:
    with pytest.raises(DatabaseError, match="watch_stepz"), any_db.transaction() as tx:
        repository.register_watch(tx, "deal", "D1", "Acme", "default", MONDAY, 0)
        tx.execute("select * from watch_stepz")
    with any_db.transaction() as tx:
        assert tx.rows("select * from watches") == [], "rolled back"


def test_bad_urls_are_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"use sqlite:///path\.db or postgresql://"):
        Database("mysql://x/y")
    with pytest.raises(ValueError, match="schema must match"):
        Database("postgresql://localhost/test?schema=a;drop")
    with pytest.raises(DatabaseError, match="cannot connect"):
        Database(f"sqlite:///{tmp_path}/missing/dir/x.db").migrate()
