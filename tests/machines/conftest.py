"""Fixtures for the example workflows: a real follow-up database (a SQLite file, or a fresh
PostgreSQL schema), a fake world in a SQLite file, and an in-memory runner on simulated time."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from machines.fakes import FakeWorld
from machines.followup import build_machines
from machines.followup.db import Database
from machines.followup.services import Services, Settings
from machines.local import LocalRunner
from statecharts import SimulatedClock

DSN = os.environ.get("STATECHARTS_TEST_DSN", "postgresql://localhost/test")
STAGES = ["Lead", "Qualified", "Proposal", "Negotiation", "Won", "Lost"]
MONDAY = date(2026, 3, 2)


def epoch_ms(day: date, hour: int = 9) -> int:
    """The instant ``hour``:00 UTC on ``day``."""
    return int(datetime(day.year, day.month, day.day, hour, tzinfo=UTC).timestamp() * 1000)


def _postgres(tmp_name: str) -> Database:
    schema = f"t_{tmp_name}_{uuid.uuid4().hex[:8]}"
    return Database(f"{DSN}?schema={schema}")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def any_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A migrated follow-up database on each backend."""
    db = Database(f"sqlite:///{tmp_path / 'followup.db'}") if request.param == "sqlite" \
        else _postgres("any")
    db.migrate()
    yield db
    if db.dialect == "postgresql":
        with db.transaction() as tx:
            tx.execute(f'drop schema "{db.schema}" cascade')
    db.close()


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    """A migrated follow-up database in a SQLite file."""
    database = Database(f"sqlite:///{tmp_path / 'followup.db'}", timeout_s=0.2)
    database.migrate()
    yield database
    database.close()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[FakeWorld]:
    """The fake CRM, task tool, mail server and summarizer, in a SQLite file."""
    fake = FakeWorld(str(tmp_path / "world.db"))
    yield fake
    fake.close()


def make_services(db: Database, world: FakeWorld, **settings: object) -> Services:
    """Services on the fakes, the CRM pipeline set up with ``STAGES``."""
    services = Services.fakes(db, world, Settings(**settings))  # type: ignore[arg-type]
    services.crm.set_stages(STAGES)  # type: ignore[attr-defined]
    return services


@pytest.fixture
def services(db: Database, world: FakeWorld) -> Services:
    """Services with the default settings (stages Proposal and Negotiation in scope)."""
    return make_services(db, world)


def make_runner(services: Services, start: int | None = None) -> LocalRunner:
    """A runner for the five follow-up machines on simulated time."""
    return LocalRunner(build_machines(services), SimulatedClock(start or epoch_ms(MONDAY)))


@pytest.fixture
def runner(services: Services) -> LocalRunner:
    """The follow-up machines on simulated time, starting Monday 2 March 2026 09:00 UTC."""
    return make_runner(services)
