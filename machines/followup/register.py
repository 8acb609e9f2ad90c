"""Register (webhook): start watching a deal that entered an in-scope stage; close its watch
when it is won, lost or leaves scope. Config: ``register.json``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Any

from machines.config import load_config
from machines.followup import repository
from machines.followup.routing import route_stage_change
from machines.followup.services import Services
from statecharts import Machine, assign, create_machine, from_callable

CONFIG = Path(__file__).with_name("register.json")


def build(services: Services) -> Machine:
    """The Register machine wired to ``services``."""
    settings = services.settings

    def route_is(context: Mapping[str, Any], event: Any, action: str) -> bool:
        return route_stage_change(context["stage"], settings.in_scope_stages).action == action

    def register_watch(input: dict[str, Any]) -> dict[str, Any]:
        with services.db.transaction() as tx:
            watch_id, created = repository.register_watch(
                tx, settings.subject_type, str(input["deal_id"]), str(input["deal_name"]),
                settings.cadence, date.fromisoformat(input["today"]), int(input["now"]))
        return {"watch_id": watch_id, "created": created}

    def close_watch(input: dict[str, Any]) -> bool:
        reason = route_stage_change(input["stage"], settings.in_scope_stages).reason
        with services.db.transaction() as tx:
            return repository.close_watch(tx, settings.subject_type, str(input["deal_id"]),
                                          reason, int(input["now"]))

    return create_machine(
        load_config(CONFIG),
        guards={"routeIs": route_is},
        actions={
            "rememberWatch": assign(lambda c, e: {"watch_id": e["output"]["watch_id"],
                                                  "created": e["output"]["created"]}),
            "rememberClosed": assign(lambda c, e: {"closed": e["output"]}),
        },
        actors={"registerWatch": from_callable(register_watch, "registerWatch"),
                "closeWatch": from_callable(close_watch, "closeWatch")})
