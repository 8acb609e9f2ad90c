"""When the follow-up workflows run: cron schedules for the durable runtime's workers.

Evaluate hourly 09:00-17:00 on weekdays, Enrich hourly at :30, the morning list at 08:00 on
weekdays and the digest at 17:30 on Fridays, in the team's time zone. Holidays are the
workflows' business (the cadence skips them), not the scheduler's. Each run is told its slot's
date and instant, and Evaluate's claim key is the slot, so a slot is one run wherever it fires.
Evaluate runs one at a time: its schedule's overlap policy is ``skip`` (a slot that comes while
the previous Evaluate is still running is skipped, and recorded on the schedule), the same rule
as its claim. Register has no schedule: the CRM's webhook starts it.

``statecharts worker --machines machines.followup --schedules machines.followup.schedules``
fires them (time zone: ``$FOLLOWUP_TZ``, default UTC).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from persistence.runtime import Runtime
from persistence.scheduling import Overlap, ScheduledStart

CRONS: dict[str, tuple[str, str, dict[str, Any], Overlap]] = {
    "followup_evaluate": ("followup_evaluate", "0 9-17 * * 1-5", {}, "skip"),
    "followup_enrich": ("followup_enrich", "30 * * * *", {}, "skip"),
    "followup_morning_list": ("followup_report", "0 8 * * 1-5", {"kind": "morning"}, "skip"),
    "followup_digest": ("followup_report", "30 17 * * 5", {"kind": "digest"}, "skip"),
}
"""Schedule name -> (workflow, cron, extra input, overlap policy)."""


def slot_input(name: str, extra: dict[str, Any], tz: str) -> Callable[[int], dict[str, Any]]:
    """The input of the run fired at slot ``fire_at`` (epoch ms) by schedule ``name``."""
    zone = ZoneInfo(tz)

    def input(fire_at: int) -> dict[str, Any]:
        today = datetime.fromtimestamp(fire_at / 1000, zone).date().isoformat()
        return {"run_key": f"{name}@{fire_at}", "today": today, "now": fire_at, **extra}

    return input


def schedules(runtime: Runtime, tz: str | None = None) -> list[ScheduledStart]:
    """The four schedules, for ``Worker(runtime, schedules=...)`` and ``statecharts worker
    --schedules machines.followup.schedules``; ``tz`` defaults to ``$FOLLOWUP_TZ`` or UTC."""
    tz = tz or os.environ.get("FOLLOWUP_TZ") or "UTC"
    return [
        ScheduledStart(
            runtime, name, workflow, cron, input=slot_input(name, extra, tz), tz=tz, overlap=overlap
        )
        for name, (workflow, cron, extra, overlap) in CRONS.items()
    ]
