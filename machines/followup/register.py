"""Register (webhook): start watching a deal that entered an in-scope stage; close its watch
when it is won, lost or leaves scope. A webhook whose stage the CRM does not know, or that
arrives while the stage filter names stages the CRM no longer has (a rename), fails the run
(``UnknownStage``, alerted) and leaves the watch alone. Config: ``register.json``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Any

from machines.config import load_config
from machines.followup import repository
from machines.followup.evaluate import fail_run
from machines.followup.routing import (
    CLOSING_STAGES,
    UnknownStage,
    route_stage_change,
    unknown_stage_problem,
)
from machines.followup.services import Services
from statecharts import Machine, assign, create_machine, from_callable
from statecharts.frozen import thaw

CONFIG = Path(__file__).with_name("register.json")
WORKFLOW = "followup_register"


def run_key_of(input: Mapping[str, Any]) -> str:
    """The run's run_log key: the one it was given, else the webhook's deal and time."""
    return str(input.get("run_key") or f"webhook:{input['deal_id']}@{input['now']}")


def build(services: Services) -> Machine:
    """The Register machine wired to ``services``."""

    def route_is(context: Mapping[str, Any], event: Any, action: str) -> bool:
        route = route_stage_change(context["stage"], services.settings.in_scope_stages)
        return route.action == action

    def register_watch(input: dict[str, Any]) -> dict[str, Any]:
        with services.db.transaction() as tx:
            watch_id, created = repository.register_watch(
                tx,
                services.settings.subject_type,
                str(input["deal_id"]),
                str(input["deal_name"]),
                services.settings.cadence,
                date.fromisoformat(input["today"]),
                int(input["now"]),
            )
            repository.record_run(
                tx,
                WORKFLOW,
                run_key_of(input),
                "ok",
                {"deal_id": input["deal_id"], "registered": created},
                int(input["now"]),
            )
        return {"watch_id": watch_id, "created": created}

    def check_stage(input: dict[str, Any]) -> bool:
        problem = unknown_stage_problem(
            input["stage"], services.settings.in_scope_stages, services.crm.stage_names()
        )
        if problem is not None:
            raise UnknownStage(problem)
        return True

    def close_watch(input: dict[str, Any]) -> bool:
        reason = route_stage_change(input["stage"], services.settings.in_scope_stages).reason
        with services.db.transaction() as tx:
            closed = repository.close_watch(
                tx, services.settings.subject_type, str(input["deal_id"]), reason, int(input["now"])
            )
            repository.record_run(
                tx,
                WORKFLOW,
                run_key_of(input),
                "ok",
                {"deal_id": input["deal_id"], "closed": closed, "reason": reason},
                int(input["now"]),
            )
        return closed

    return create_machine(
        load_config(CONFIG),
        guards={"routeIs": route_is, "closesForGood": lambda c, e: c["stage"] in CLOSING_STAGES},
        actions={
            "rememberWatch": assign(
                lambda c, e: {
                    "watch_id": e["output"]["watch_id"],
                    "created": e["output"]["created"],
                }
            ),
            "rememberClosed": assign(lambda c, e: {"closed": e["output"]}),
            "rememberFailure": assign(lambda c, e: {"failure": thaw(e.get("error"))}),
        },
        actors={
            "registerWatch": from_callable(register_watch, "registerWatch"),
            "checkStage": from_callable(check_stage, "checkStage"),
            "closeWatch": from_callable(close_watch, "closeWatch"),
            "failRun": from_callable(fail_run, "failRun"),
        },
    )
