"""Alerts (the error workflow): log a failed run and send a deduplicated alert to ops.

Started once per failed run of the other four workflows, with the run's workflow, key, state
and error; a failing Alerts run starts nothing. Config: ``alerts.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from machines.config import load_config
from machines.followup import repository
from machines.followup.services import Services
from statecharts import Machine, assign, create_machine, from_callable

CONFIG = Path(__file__).with_name("alerts.json")
WORKFLOW = "followup_alerts"


def alert_key(workflow: str, error: Mapping[str, Any] | None) -> str:
    """Alerts with the same key are one alert: the same workflow failing the same way."""
    return f"{workflow}:{(error or {}).get('name', 'Error')}"


def alert_text(workflow: str, run_key: str, state: str | None,
               error: Mapping[str, Any] | None) -> tuple[str, str]:
    """Subject and body of the alert mail."""
    error = error or {}
    name, message = error.get("name", "Error"), error.get("message", "")
    return (f"[followup] {workflow} failed: {name}",
            f"Run {run_key} of {workflow} failed in state {state or '?'}.\n{name}: {message}")


def build(services: Services) -> Machine:
    """The Alerts machine wired to ``services``."""
    def log_failure(input: dict[str, Any]) -> dict[str, Any]:
        key = alert_key(input["workflow"], input["error"])
        now = int(input["now"])
        _, body = alert_text(input["workflow"], str(input["run_key"]), input["state"],
                             input["error"])
        with services.db.transaction() as tx:
            duplicate = repository.recently_alerted(
                tx, key, now - services.settings.alert_dedupe_ms)
            repository.log_failure(tx, input["workflow"], str(input["run_key"]), body, key, now)
        return {"duplicate": duplicate, "alert_key": key}

    def send_alert(input: dict[str, Any]) -> str:
        if input["dry_run"]:
            return repository.DRY_RUN_TASK
        subject, body = alert_text(input["workflow"], str(input["run_key"]), input["state"],
                                   input["error"])
        return services.mail.send(services.settings.ops_inbox, subject, body,
                                  key=f"{WORKFLOW}:{input['workflow']}:{input['run_key']}")

    def mark_alerted(input: dict[str, Any]) -> bool:
        with services.db.transaction() as tx:
            repository.mark_alerted(tx, input["workflow"], str(input["run_key"]),
                                    int(input["now"]))
        return True

    return create_machine(
        load_config(CONFIG),
        guards={"isDuplicate": lambda c, e: bool(c["duplicate"])},
        actions={"rememberLogged": assign(lambda c, e: {
            "duplicate": e["output"]["duplicate"], "alert_key": e["output"]["alert_key"]})},
        actors={"logFailure": from_callable(log_failure, "logFailure"),
                "sendAlert": from_callable(send_alert, "sendAlert"),
                "markAlerted": from_callable(mark_alerted, "markAlerted")})
