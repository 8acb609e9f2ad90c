"""Fixtures for the example workflows: a real follow-up database (a SQLite file, or a fresh
PostgreSQL schema), a fake world in a SQLite file, and the runners on simulated time.

``runner`` and ``new_runner`` are parametrized over the in-memory ``LocalRunner`` and the
durable runtime (``DurableRunner``: a run store in a SQLite file, and in a PostgreSQL schema
where a server answers), each driven by one in-process worker: every rule test runs on both,
so the two can never diverge again."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from machines.durable import DurableRunner
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
    db = (
        Database(f"sqlite:///{tmp_path / 'followup.db'}")
        if request.param == "sqlite"
        else _postgres("any")
    )
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


Runner = LocalRunner | DurableRunner
NewRunner = Callable[..., Runner]
RUNNERS = [
    "local",
    "durable-sqlite",
    pytest.param("durable-postgresql", marks=pytest.mark.postgres),
]


def make_runner(services: Services, start: int | None = None) -> LocalRunner:
    """An in-memory runner for the five follow-up machines on simulated time."""
    return LocalRunner(build_machines(services), SimulatedClock(start or epoch_ms(MONDAY)))


def drop_schema(url: str) -> None:
    """Drop the PostgreSQL schema named in ``url`` (a test's own)."""
    cleanup = Database(url)
    with cleanup.transaction() as tx:
        tx.execute(f'drop schema if exists "{cleanup.schema}" cascade')
    cleanup.close()


@pytest.fixture(params=RUNNERS)
def new_runner(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[NewRunner]:
    """``new_runner(services, start=None)``: the follow-up machines on a fresh runner of this
    parameter's kind (each durable one on its own run store) on simulated time."""
    made: list[DurableRunner] = []
    schemas: list[str] = []

    def new(services: Services, start: int | None = None) -> Runner:
        begin = start or epoch_ms(MONDAY)
        if request.param == "local":
            return make_runner(services, begin)
        if request.param == "durable-sqlite":
            url = f"sqlite:///{tmp_path / f'runs-{len(made)}.db'}"
        else:
            url = f"{DSN}?schema=runs_{uuid.uuid4().hex[:10]}"
            schemas.append(url)
        durable = DurableRunner(
            url, list(build_machines(services).values()), start=begin, lease_ms=60_000
        )
        made.append(durable)
        return durable

    yield new
    for durable in made:
        durable.close()
    for url in schemas:
        drop_schema(url)


@pytest.fixture
def runner(services: Services, new_runner: NewRunner) -> Runner:
    """The follow-up machines on simulated time, starting Monday 2 March 2026 09:00 UTC, on
    each runner."""
    return new_runner(services)
