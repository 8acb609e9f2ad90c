"""What the follow-up workflows are wired to: the database, the adapters and the settings.

``Services.from_env()`` builds them from environment variables, connecting lazily (importing
``machines.followup`` touches no file or server):

- ``FOLLOWUP_DATABASE``: the follow-up database URL (default ``sqlite:///followup.db``)
- ``FOLLOWUP_FAKES``: the fake world's SQLite file (default ``followup-fakes.db``)
- ``FOLLOWUP_STAGES``: in-scope CRM stage names, comma separated (default
  ``Proposal,Negotiation``)

Each downstream system is a fake unless its real adapter is configured:

- CRM: ``ESPOCRM_URL`` and ``ESPOCRM_API_KEY`` (``machines.followup.espocrm``)
- task tool: ``CLICKUP_TOKEN``, ``CLICKUP_LIST_ID``, ``CLICKUP_KEY_FIELD_ID``
  (``machines.followup.clickup``)
- mail: ``SMTP_HOST`` (and ``SMTP_PORT``, ``SMTP_USERNAME``, ``SMTP_PASSWORD``,
  ``SMTP_STARTTLS=1``, ``MAIL_FROM``) (``machines.smtp``)
- summarizer: ``MISTRAL_API_KEY`` (and ``MISTRAL_MODEL``, ``MISTRAL_URL``)
  (``machines.followup.mistral``)
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
    def fakes(cls, db: Database, world: FakeWorld, settings: Settings | None = None) -> Services:
        """Services on the fake adapters of ``world``."""
        return cls(
            db,
            FakeCrm(world),
            FakeTaskTool(world),
            FakeMailer(world),
            FakeSummarizer(world),
            settings or Settings(),
        )

    @classmethod
    def from_env(cls) -> Services:
        """Services configured by the environment (see the module docstring)."""
        stages = os.environ.get("FOLLOWUP_STAGES")
        settings = (
            Settings(in_scope_stages=tuple(s.strip() for s in stages.split(",") if s.strip()))
            if stages
            else Settings()
        )
        services = cls.fakes(
            Database(os.environ.get("FOLLOWUP_DATABASE", "sqlite:///followup.db")),
            FakeWorld(os.environ.get("FOLLOWUP_FAKES", "followup-fakes.db")),
            settings,
        )
        env = os.environ
        if env.get("ESPOCRM_URL"):
            from machines.followup.espocrm import EspoCrm

            services.crm = EspoCrm(env["ESPOCRM_URL"], env.get("ESPOCRM_API_KEY", ""))
        if env.get("CLICKUP_TOKEN"):
            from machines.followup.clickup import ClickUpTasks

            services.tasks = ClickUpTasks(
                env["CLICKUP_TOKEN"],
                env.get("CLICKUP_LIST_ID", ""),
                env.get("CLICKUP_KEY_FIELD_ID", ""),
            )
        if env.get("SMTP_HOST"):
            from machines.smtp import SmtpMailer

            services.mail = SmtpMailer(
                env["SMTP_HOST"],
                int(env.get("SMTP_PORT", "587")),
                env.get("MAIL_FROM", "followup@localhost"),
                username=env.get("SMTP_USERNAME"),
                password=env.get("SMTP_PASSWORD"),
                starttls=env.get("SMTP_STARTTLS") == "1",
            )
        if env.get("MISTRAL_API_KEY"):
            from machines.followup.mistral import MISTRAL_API, ChatSummarizer

            services.summarizer = ChatSummarizer(
                env["MISTRAL_API_KEY"],
                env.get("MISTRAL_MODEL", "mistral-small-latest"),
                env.get("MISTRAL_URL", MISTRAL_API),
            )
        return services
