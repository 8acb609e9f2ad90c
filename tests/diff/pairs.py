"""A small order workflow and edits of it, one kind of change each, for the diff tests."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from statecharts import Machine, create_machine

IMPLEMENTATIONS: dict[str, Any] = {
    "actors": {
        "chargeCard": lambda i: None,
        "sendMail": lambda i: None,
        "notifyTeam": lambda i: None,
    },
    "guards": {"isPaid": lambda c, e: True, "isLarge": lambda c, e: True},
    "actions": {
        "logStart": lambda c, e: None,
        "recordPayment": lambda c, e: None,
        "notifyOps": lambda c, e: None,
    },
    "delays": {"paymentTimeout": 600_000},
}

BASE: dict[str, Any] = {
    "id": "order",
    "version": "1",
    "context": {"amount": 0, "paid": False},
    "initial": "waiting_for_payment",
    "states": {
        "waiting_for_payment": {
            "entry": "logStart",
            "on": {
                "PAY": [
                    {"target": "charging", "guard": "isPaid", "actions": "recordPayment"},
                    {"target": "cancelled"},
                ],
                "CANCEL": "cancelled",
            },
            "after": {"300000": "cancelled"},
        },
        "charging": {
            "invoke": {
                "id": "charge",
                "src": "chargeCard",
                "retry": {"max_attempts": 3, "initial_interval": 1000, "backoff": "fixed"},
                "onDone": "shipping",
                "onError": "failed",
            },
        },
        "shipping": {
            "initial": "packing",
            "states": {
                "packing": {"on": {"PACKED": "labelling"}},
                "labelling": {"on": {"LABELLED": "done"}},
                "done": {"type": "final"},
            },
            "onDone": "delivered",
        },
        "delivered": {"type": "final"},
        "cancelled": {"type": "final"},
        "failed": {"type": "final"},
    },
}


def machine(config: dict[str, Any], **extra: Any) -> Machine:
    """The order workflow from ``config`` with the test implementations."""
    return create_machine(config, **IMPLEMENTATIONS, **extra)


def edited(edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """A deep copy of BASE changed by ``edit``."""
    config = copy.deepcopy(BASE)
    edit(config)
    return config


def reviewed_change(config: dict[str, Any]) -> None:
    """The change drawn in docs/diagrams.md ("reviewing a change"): more card retries, a
    longer payment window, a new hold step, labelling dropped from shipping, an error
    workflow."""
    states = config["states"]
    config["meta"] = {"error_workflow": "order_alerts"}
    states["charging"]["invoke"]["retry"]["max_attempts"] = 5
    states["waiting_for_payment"]["after"] = {"900000": "cancelled"}
    states["waiting_for_payment"]["on"]["HOLD"] = "on_hold"
    states["on_hold"] = {"on": {"RESUME": "waiting_for_payment"}}
    del states["shipping"]["states"]["labelling"]
    states["shipping"]["states"]["packing"]["on"]["PACKED"] = "done"
