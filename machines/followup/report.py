"""Report (two schedules): the morning list and the Friday digest, mailed to sales.

It reads only the follow-up database (the subject name is stored on the watch), so it works
while the CRM is down. Config: ``report.json``; the text is ``machines.followup.digest``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from machines.config import load_config
from machines.followup import repository
from machines.followup.db import Transaction
from machines.followup.digest import Closed, FollowUp, digest_text, long_date, morning_list_text
from machines.followup.services import Services
from statecharts import Machine, assign, create_machine, from_callable

CONFIG = Path(__file__).with_name("report.json")
WORKFLOW = "followup_report"


def follow_up(row: Mapping[str, Any]) -> FollowUp:
    """A step row from the repository as the digest's ``FollowUp``."""
    return FollowUp(
        str(row["subject_name"]),
        int(row["step"]),
        int(row["steps"]),
        date.fromisoformat(str(row["due_on"])),
        row.get("task_id"),
        row.get("summary"),
    )


def _epoch_ms(day: date) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000)


def morning_list(tx: Transaction, today: date) -> str:
    """The morning list from the database."""
    return morning_list_text(
        today, [follow_up(r) for r in repository.due_steps(tx, today)], repository.holidays(tx)
    )


def digest(tx: Transaction, today: date) -> str:
    """The digest of the week ``today`` is in."""
    friday = today + timedelta(days=4 - today.weekday())
    monday = friday - timedelta(days=4)
    fired = [follow_up(r) for r in repository.steps_fired_between(tx, monday, friday)]
    opened = [str(r["subject_name"]) for r in repository.watches_opened_between(tx, monday, friday)]
    closed = [
        Closed(str(r["subject_name"]), str(r["closed_reason"]))
        for r in repository.watches_closed_between(
            tx, _epoch_ms(monday), _epoch_ms(friday + timedelta(days=1))
        )
    ]
    upcoming = [
        follow_up(r)
        for r in repository.steps_due_between(
            tx, monday + timedelta(days=7), friday + timedelta(days=7)
        )
    ]
    return digest_text(friday, fired, opened, closed, upcoming)


def build(services: Services) -> Machine:
    """The Report machine wired to ``services``."""

    def compose_morning_list(input: dict[str, Any]) -> str:
        with services.db.transaction() as tx:
            return morning_list(tx, date.fromisoformat(input["today"]))

    def compose_digest(input: dict[str, Any]) -> str:
        with services.db.transaction() as tx:
            return digest(tx, date.fromisoformat(input["today"]))

    def send_report(input: dict[str, Any]) -> str:
        if input["dry_run"]:
            return repository.DRY_RUN_TASK
        today = date.fromisoformat(input["today"])
        title = "Follow-up digest" if input["kind"] == "digest" else "Follow-ups"
        return services.mail.send(
            services.settings.sales_inbox,
            f"{title}, {long_date(today)}",
            str(input["report"]),
            key=f"{WORKFLOW}:{input['kind']}:{input['today']}",
        )

    def log_run(input: dict[str, Any]) -> bool:
        key = str(input["run_key"] or f"{WORKFLOW}:{input['kind']}@{input['today']}")
        with services.db.transaction() as tx:
            repository.record_run(
                tx,
                WORKFLOW,
                key,
                "ok",
                {"kind": input["kind"], "message_id": input["message_id"]},
                int(input["now"]),
            )
        return True

    return create_machine(
        load_config(CONFIG),
        guards={"isDigest": lambda c, e: c["kind"] == "digest"},
        actions={
            "rememberReport": assign(lambda c, e: {"report": e["output"]}),
            "rememberMessage": assign(lambda c, e: {"message_id": e["output"]}),
        },
        actors={
            "composeMorningList": from_callable(compose_morning_list, "composeMorningList"),
            "composeDigest": from_callable(compose_digest, "composeDigest"),
            "sendReport": from_callable(send_report, "sendReport"),
            "logRun": from_callable(log_run, "logRun"),
        },
    )
