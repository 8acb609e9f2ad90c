"""The CRM follow-up machine: five workflows that share one database and nothing else.

- ``followup_register`` (webhook), ``followup_evaluate`` (hourly, weekdays),
  ``followup_report`` (morning list and Friday digest), ``followup_enrich`` (hourly at :30),
  ``followup_alerts`` (the error workflow the other four name in their ``meta``).

``MACHINES`` are wired to ``Services.from_env()`` (lazy: importing connects to nothing);
``build_machines(services)`` wires them to anything else. Their cron schedules are in
``machines.followup.schedules``.
"""

from __future__ import annotations

from machines.followup import alerts, enrich, evaluate, register, report
from machines.followup.services import Services, Settings
from statecharts import Machine

ERROR_WORKFLOW = alerts.WORKFLOW


def build_machines(services: Services) -> dict[str, Machine]:
    """The five machines wired to ``services``, by machine id."""
    machines = [
        register.build(services),
        evaluate.build(services),
        report.build(services),
        enrich.build(services),
        alerts.build(services),
    ]
    return {m.id: m for m in machines}


MACHINES: dict[str, Machine] = build_machines(Services.from_env())

__all__ = ["ERROR_WORKFLOW", "MACHINES", "Services", "Settings", "build_machines"]
