"""Workflows of the run-lifecycle tests (waiting for answers, search attributes), importable by
worker subprocesses (`--machines tests.persistence.lifecycle_workflows`)."""

from __future__ import annotations

import os
import time
from typing import Any

from statecharts import assign, create_machine

WORK_MS_ENV = "STATECHARTS_TEST_WORK_MS"
"""How long `work` takes in milliseconds (default 0): keeps a run busy while events arrive."""


def work(context: Any, idempotency_key: str) -> int:
    """A call that takes `STATECHARTS_TEST_WORK_MS`."""
    time.sleep(int(os.environ.get(WORK_MS_ENV, "0")) / 1000)
    return 1


def _explode(context: Any, event: Any) -> None:
    raise RuntimeError("exploded on purpose")


tally = create_machine(
    {
        "id": "tally",
        "initial": "idle",
        "meta": {"search": ["customer", "region"]},
        "context": lambda input: {
            "customer": (input or {}).get("customer"),
            "region": (input or {}).get("region"),
            "count": 0,
        },
        "states": {
            "idle": {
                "on": {
                    "ADD": {"target": "working", "actions": "add"},
                    "MOVE": {"actions": "move"},
                    "FINISH": "finished",
                    "BREAK": {"actions": "explode"},
                },
            },
            "working": {
                "invoke": {"id": "work", "src": "work", "onDone": "idle"},
                "on": {
                    "ADD": {"actions": "add"},
                    "MOVE": {"actions": "move"},
                    "FINISH": "finished",
                },
            },
            "finished": {"type": "final"},
        },
        "output": lambda c, e: {"count": c["count"]},
    },
    actors={"work": work},
    actions={
        "add": assign({"count": lambda c, e: c["count"] + int(e.get("n", 1))}),
        "move": assign({"region": lambda c, e: e.get("region")}),
        "explode": _explode,
    },
)
"""Counts ADD events; each ADD from idle runs `work` (the run is busy meanwhile: events sent
then are queued for a worker). Search attributes: customer, region."""

MACHINES = [tally]
