"""Example machines for the test kit's own tests and for docs/testing.md."""

from __future__ import annotations

from typing import Any

from statecharts import assign, create_machine, from_callable
from statecharts.machine import Machine

PRICE = 2


def vending_config() -> dict[str, Any]:
    """A vending machine: coins add credit, SELECT vends when the credit covers the price."""
    return {
        "id": "vending",
        "context": {"credit": 0},
        "initial": "idle",
        "states": {
            "idle": {"on": {"COIN": {"target": "paying", "actions": "add_coin"}}},
            "paying": {
                "on": {
                    "COIN": {"actions": "add_coin"},
                    "REFUND": {"target": "idle", "actions": "clear"},
                    "SELECT": {"target": "vending", "guard": "can_afford", "actions": "charge"},
                },
            },
            "vending": {
                "meta": {"invariants": ["credit_not_negative"]},
                "on": {"TAKE": [{"target": "paying", "guard": "has_credit"}, {"target": "idle"}]},
            },
        },
    }


def vending_machine(*, seeded_bug: bool) -> Machine:
    """With ``seeded_bug`` the guard checks ``credit >= 1`` instead of ``>= PRICE`` (an
    off-by-one the kit must find: COIN then SELECT leaves the credit at -1)."""
    need = 1 if seeded_bug else PRICE
    return create_machine(
        vending_config(),
        guards={
            "can_afford": lambda ctx, ev: ctx["credit"] >= need,
            "has_credit": lambda ctx, ev: ctx["credit"] > 0,
        },
        actions={
            "add_coin": assign({"credit": lambda ctx, ev: min(ctx["credit"] + 1, 5)}),
            "charge": assign({"credit": lambda ctx, ev: ctx["credit"] - PRICE}),
            "clear": assign({"credit": 0}),
        },
    )


CHECKS = {"credit_not_negative": lambda ctx: ctx["credit"] >= 0}


def door_machine() -> Machine:
    """A door with an auto-close timer, a lock, and a state nothing leads to (for coverage)."""
    return create_machine(
        {
            "id": "door",
            "initial": "closed",
            "states": {
                "closed": {"on": {"OPEN": "opened", "LOCK": "locked"}},
                "opened": {"after": {"5000": "closed"}, "on": {"CLOSE": "closed"}},
                "locked": {"on": {"UNLOCK": "closed"}},
                "broken": {"on": {"REPAIR": "closed"}},
            },
        }
    )


def counter_machine(limit: int = 3) -> Machine:
    """Guards on context: INC counts up to ``limit``, then the counter is full; RESET empties
    it; DONE finishes only when full."""
    return create_machine(
        {
            "id": "counter",
            "context": {"count": 0},
            "initial": "counting",
            "states": {
                "counting": {
                    "always": {"target": "full", "guard": "at_limit"},
                    "on": {"INC": {"actions": "inc"}},
                },
                "full": {
                    "on": {"RESET": {"target": "counting", "actions": "reset"}, "DONE": "finished"}
                },
                "finished": {"type": "final"},
            },
        },
        guards={"at_limit": lambda ctx, ev: ctx["count"] >= limit},
        actions={
            "inc": assign({"count": lambda ctx, ev: ctx["count"] + 1}),
            "reset": assign({"count": 0}),
        },
    )


def jam_machine() -> Machine:
    """A printer that can jam for good: a non-final state nothing leaves (a deadlock)."""
    return create_machine(
        {
            "id": "printer",
            "initial": "ready",
            "states": {
                "ready": {"on": {"PRINT": "printing", "OFF": "off"}},
                "printing": {"on": {"DONE": "ready", "JAM": "jammed"}},
                "jammed": {"on": {"PRINT": "jammed"}},
                "off": {"type": "final"},
            },
        }
    )


def player_machine() -> Machine:
    """Parallel regions and deep history: a media player."""
    return create_machine(
        {
            "id": "player",
            "initial": "on",
            "states": {
                "on": {
                    "type": "parallel",
                    "on": {"POWER": "off"},
                    "states": {
                        "playback": {
                            "initial": "paused",
                            "states": {
                                "paused": {"on": {"PLAY": "playing"}},
                                "playing": {"on": {"PAUSE": "paused"}},
                            },
                        },
                        "volume": {
                            "initial": "normal",
                            "states": {
                                "normal": {"on": {"MUTE": "muted"}},
                                "muted": {"on": {"MUTE": "normal"}},
                            },
                        },
                        "hist": {"type": "history", "history": "deep"},
                    },
                },
                "off": {"on": {"POWER": "#player.on.hist", "EJECT": "ejected"}},
                "ejected": {"type": "final"},
            },
        }
    )


def subscription_machine(bug: str | None = None) -> Machine:
    """A three-call workflow: fetch the account, charge the card (retried), e-mail a receipt.

    ``bug="lost_receipt"``: the second call's ``onDone`` goes to a state that does nothing (the
    receipt step was never wired), so the run hangs after charging. ``bug="charge_again"``: it
    goes back to charging, so the card is charged again and again. Both sit past the first
    invoke, where a kit that never completes calls cannot see."""
    after_charge = {
        None: "emailing",
        "lost_receipt": "awaiting_receipt",
        "charge_again": {"target": "charging", "reenter": True},
    }[bug]
    return create_machine(
        {
            "id": "subscription",
            "context": {"charges": 0},
            "initial": "fetching_account",
            "states": {
                "fetching_account": {
                    "invoke": {
                        "id": "fetch_account",
                        "src": "fetchAccount",
                        "onDone": "charging",
                        "onError": "failed",
                    }
                },
                "charging": {
                    "entry": "countCharge",
                    "invoke": {
                        "id": "charge",
                        "src": "chargeCard",
                        "retry": {
                            "max_attempts": 2,
                            "initial_interval": 1000,
                            "non_retryable": ["CardDeclined"],
                        },
                        "onDone": after_charge,
                        "onError": "failed",
                    },
                },
                **({"awaiting_receipt": {}} if bug == "lost_receipt" else {}),
                "emailing": {
                    "invoke": {
                        "id": "email",
                        "src": "sendReceipt",
                        "onDone": "subscribed",
                        "onError": "subscribed",
                    }
                },
                "subscribed": {"type": "final"},
                "failed": {"type": "final"},
            },
        },
        actions={"countCharge": assign({"charges": lambda ctx, ev: ctx["charges"] + 1})},
        actors={
            name: from_callable(_unused, name)
            for name in ("fetchAccount", "chargeCard", "sendReceipt")
        },
    )


def _unused(input: Any) -> Any:
    raise AssertionError("the test kit plays the calls' outcomes; nothing calls this")
