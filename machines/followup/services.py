"""What the follow-up workflows are wired to: the database, the adapters and the settings.

``Services.from_env()`` builds them from environment variables, connecting lazily (importing
``machines.followup`` touches no file or server):

- ``FOLLOWUP_DATABASE``: the follow-up database URL (default ``sqlite:///followup.db``)
- ``FOLLOWUP_FAKES``: the fake world's SQLite file (default ``followup-fakes.db``)
- ``FOLLOWUP_STAGES``: in-scope CRM stage names, comma separated (default
  ``Proposal,Negotiation``)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from machines.fakes import FakeWorld
from machines.followup.adapters import (
    Crm,
    FakeCrm,
    FakeSummarizer,
    FakeTaskTool,
    Summarizer,
    TaskTool,
)
from machines.followup.db import Database
from machines.followup.routing import DEFAULT_STAGES
from machines.mail import FakeMailer, Mailer

HOUR = 3_600_000


@dataclass(frozen=True)
class Settings:
    """Business settings. ``in_scope_stages`` is the stage-name filter."""

    in_scope_stages: tuple[str, ...] = DEFAULT_STAGES
    cadence: str = "default"
    subject_type: str = "deal"
    claim_stale_after_ms: int = 2 * HOUR
    claim_alert_after_ms: int = HOUR
    alert_dedupe_ms: int = 6 * HOUR
    summary_lookback_ms: int = 14 * 24 * HOUR
    sales_inbox: str = "sales@example.com"
    ops_inbox: str = "ops@example.com"


@dataclass
class Services:
    """The database, the four adapters and the settings the workflows use."""

    db: Database
    crm: Crm
    tasks: TaskTool
    mail: Mailer
    summarizer: Summarizer
    settings: Settings = field(default_factory=Settings)

    @classmethod
    def fakes(cls, db: Database, world: FakeWorld,
              settings: Settings | None = None) -> Services:
        """Services on the fake adapters of ``world``."""
        return cls(db, FakeCrm(world), FakeTaskTool(world), FakeMailer(world),
                   FakeSummarizer(world), settings or Settings())

    @classmethod
    def from_env(cls) -> Services:
        """Services configured by the environment (see the module docstring)."""
        stages = os.environ.get("FOLLOWUP_STAGES")
        settings = Settings(in_scope_stages=tuple(s.strip() for s in stages.split(",")
                                                  if s.strip())) if stages else Settings()
        return cls.fakes(Database(os.environ.get("FOLLOWUP_DATABASE", "sqlite:///followup.db")),
                         FakeWorld(os.environ.get("FOLLOWUP_FAKES", "followup-fakes.db")),
                         settings)
