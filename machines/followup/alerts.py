"""Alerts (the error workflow): log a failed run and send a deduplicated alert to ops.

The other four name it in their configs (``"meta": {"error_workflow": "followup_alerts"}``), so
the durable runtime starts it exactly once per failed run with ``{run_id, workflow, state,
error}``; ``machines.local.LocalRunner`` does the same in memory (adding ``run_key`` and
``now``). A failing Alerts run starts nothing. Config: ``alerts.json``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from machines.config import load_config
from machines.followup import repository
from machines.followup.services import Services
from persistence.runtime import error_detail
from statecharts import Machine, assign, create_machine, from_callable

CONFIG = Path(__file__).with_name("alerts.json")
WORKFLOW = "followup_alerts"


def error_parts(error: Any) -> tuple[str, str]:
    """(name, message) of a failed run's error (the contract's ``{"name", "message"}``)."""
    detail = error_detail(error)
    return detail["name"], detail["message"]


def alert_key(workflow: str, error: Any) -> str:
    """Alerts with the same key are one alert: the same workflow failing the same way."""
    return f"{workflow}:{error_parts(error)[0]}"


def alert_text(workflow: str, run_key: str, state: str | None, error: Any) -> tuple[str, str]:
    """Subject and body of the alert mail."""
    name, message = error_parts(error)
    return (
        f"[followup] {workflow} failed: {name}",
        f"Run {run_key} of {workflow} failed in state {state or '?'}.\n{name}: {message}",
    )


def run_key_of(input: Mapping[str, Any]) -> str:
    """The failed run's key (Evaluate's claim key: the schedules start it with its slot as
    both), else its run id."""
    return str(input.get("key") or input.get("run_id"))


def own_key(input: Mapping[str, Any]) -> str:
    """This Alerts run's own run_log key."""
    return f"error-of:{input['run_id']}"


def failed_at(input: Mapping[str, Any]) -> int:
    """When the run failed (the contract's ``failed_at``; the wall clock if a caller left it
    out)."""
    given = input.get("failed_at")
    return int(given) if given is not None else time.time_ns() // 1_000_000


def build(services: Services) -> Machine:
    """The Alerts machine wired to ``services``."""

    def log_failure(input: dict[str, Any]) -> dict[str, Any]:
        key = alert_key(input["workflow"], input["error"])
        now = failed_at(input)
        _, body = alert_text(input["workflow"], run_key_of(input), input["state"], input["error"])
        with services.db.transaction() as tx:
            duplicate = repository.recently_alerted(
                tx, key, now - services.settings.alert_dedupe_ms
            )
            repository.log_failure(tx, input["workflow"], run_key_of(input), body, key, now)
        return {"duplicate": duplicate, "alert_key": key}

    def send_alert(input: dict[str, Any]) -> str:
        if input["dry_run"]:
            return repository.DRY_RUN_TASK
        subject, body = alert_text(
            input["workflow"], run_key_of(input), input["state"], input["error"]
        )
        return services.mail.send(
            services.settings.ops_inbox,
            subject,
            body,
            key=f"{WORKFLOW}:{input['workflow']}:{run_key_of(input)}",
        )

    def mark_alerted(input: dict[str, Any]) -> bool:
        with services.db.transaction() as tx:
            repository.mark_alerted(tx, input["workflow"], run_key_of(input), failed_at(input))
            repository.record_run(
                tx,
                WORKFLOW,
                own_key(input),
                "ok",
                {"alerted": input["alert_key"]},
                failed_at(input),
            )
        return True

    def note_suppressed(input: dict[str, Any]) -> bool:
        with services.db.transaction() as tx:
            repository.record_run(
                tx,
                WORKFLOW,
                own_key(input),
                "ok",
                {"suppressed": input["alert_key"]},
                failed_at(input),
            )
        return True

    return create_machine(
        load_config(CONFIG),
        guards={"isDuplicate": lambda c, e: bool(c["duplicate"])},
        actions={
            "rememberLogged": assign(
                lambda c, e: {
                    "duplicate": e["output"]["duplicate"],
                    "alert_key": e["output"]["alert_key"],
                }
            )
        },
        actors={
            "logFailure": from_callable(log_failure, "logFailure"),
            "sendAlert": from_callable(send_alert, "sendAlert"),
            "markAlerted": from_callable(mark_alerted, "markAlerted"),
            "noteSuppressed": from_callable(note_suppressed, "noteSuppressed"),
        },
    )
