"""A user's machine, typed: ``mypy --strict`` passes on it, and it runs (see test_typed_config).

Every shape the config types accept is used once here.
"""

from __future__ import annotations

from statecharts import (
    MachineConfig,
    RetryConfig,
    RetryPolicy,
    and_,
    assign,
    create_machine,
    not_,
    state_in,
)

charge_retry: RetryConfig = {
    "max_attempts": 3,
    "backoff": "exponential",
    "initial_interval": 1000,
    "non_retryable": ["CardDeclined"],
}

config: MachineConfig = {
    "id": "order",
    "initial": "cart",
    "context": {"items": 0},
    "description": "an order from cart to payment",
    "states": {
        "cart": {
            "on": {
                "ADD": {"actions": assign({"items": lambda ctx, ev: ctx["items"] + 1})},
                "CHECKOUT": [
                    {"guard": "has_items", "target": "paying"},
                    {"actions": {"type": "warn", "params": {"why": "empty cart"}}},
                ],
                "RESET": {"target": "cart", "reenter": True},
            },
            "tags": "shopping",
        },
        "paying": {
            "invoke": {
                "src": "charge",
                "input": {"amount": 10},
                "retry": charge_retry,
                "onDone": "paid",
                "onError": {"target": "failed", "actions": ["warn"]},
                "breaker": "payments",
            },
            "after": {
                60_000: "failed",
                "5000": {
                    "guard": and_("has_items", not_(state_in("#order.cart"))),
                    "actions": "warn",
                },
            },
        },
        "refunding": {
            "invoke": [
                {
                    "src": "refund",
                    "retry": RetryPolicy(max_attempts=2),
                    "onDone": "failed",
                    "onFinalFailure": "skip",
                }
            ],
        },
        "review": {
            "type": "parallel",
            "states": {
                "a": {
                    "initial": "x",
                    "states": {"x": {"always": {"target": "y"}}, "y": {"type": "final"}},
                },
                "b": {
                    "initial": "p",
                    "states": {"p": {}, "h": {"type": "history", "history": "deep", "target": "p"}},
                },
            },
            "onDone": "paid",
        },
        "failed": {"type": "final", "output": {"ok": False}},
        "paid": {
            "type": "final",
            "entry": ["thank", assign({"items": 0})],
            "meta": {"owner": "billing"},
        },
    },
    "output": lambda ctx, ev: {"items": ctx["items"]},
}

machine = create_machine(
    config,
    guards={"has_items": lambda ctx, ev: ctx["items"] > 0},
    actions={"warn": lambda ctx, ev, **params: None, "thank": lambda ctx, ev: None},
    actors={"charge": lambda data: {"charged": data["amount"]}, "refund": lambda data: None},
)
