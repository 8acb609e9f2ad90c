"""The durable check never scripts a failure the durable runtime rolls back and retries
(``"transient"`` on the invoke): no durable run sees it as an outcome."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import find
from hypothesis.errors import NoSuchExample

from statecharts import create_machine
from statecharts.testing.outcomes import running_calls
from statecharts.testing.strategies import outcome_strategy

MACHINE = create_machine(
    {
        "id": "saving",
        "initial": "saving",
        "states": {
            "saving": {
                "invoke": {
                    "id": "save",
                    "src": "save",
                    "transient": ["DatabaseError"],
                    "onDone": "saved",
                    "onError": "failed",
                }
            },
            "saved": {"type": "final"},
            "failed": {"type": "final"},
        },
    },
    actors={"save": lambda input: True},
)
CALL = running_calls(MACHINE, MACHINE.initial_transition(None, 0)[0])[0]


def failed_with(name: str) -> Callable[[Any], bool]:
    return lambda event: "error" in event and event["error"]["name"] == name


def test_durable_outcomes_leave_transient_failures_out() -> None:
    outputs = {"save": [True]}
    assert find(outcome_strategy(MACHINE, CALL, outputs), failed_with("DatabaseError"))
    with pytest.raises(NoSuchExample):
        find(outcome_strategy(MACHINE, CALL, outputs, durable=True), failed_with("DatabaseError"))
    assert find(outcome_strategy(MACHINE, CALL, outputs, durable=True), failed_with("Error")), (
        "other failures stay"
    )
