"""The order workflow, three levels deep: an order run invokes a payment run, which invokes a
fraud-check run (durable child runs, docs/persistence.md "Child runs").

- ``fraud_check`` scores the card (``score_risk``); a risky score waits for a person
  (``APPROVE`` / ``REJECT``, sent to the fraud-check run by its key
  ``<order key>/payment/fraud_check``); a card the scorer refuses, or a rejection, ends it in
  the failure final ``rejected``.
- ``payment`` waits for the fraud check, then charges the card (``charge_card``, with the
  call's idempotency key); a failed fraud check ends it in the failure final ``refused``.
- ``order`` waits for the payment: done, it is ``confirmed`` with the receipt; failed (at any
  depth), its ``onError`` takes it to ``payment_failed`` with the error.

The scorer and the charge are deterministic fakes driven by the card in the input (``"ok"``,
``"review"``, ``"stolen"``), so tests and the demo need no outside service.
"""

from __future__ import annotations

from typing import Any

from statecharts import Machine, assign, create_machine, from_callable, send_parent

REVIEW_SCORE = 50
"""Risk scores from this on wait for a person's decision."""


class FraudSuspected(Exception):
    """The scorer refuses the card outright."""


def score_risk(check: dict[str, Any]) -> int:
    """The risk score of a card (a fake scorer: ``stolen`` is refused, ``review`` is risky)."""
    card = check.get("card")
    if card == "stolen":
        raise FraudSuspected(f"card {card!r} is reported stolen")
    return 80 if card == "review" else 10


def charge_card(charge: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
    """Charge the card once per idempotency key (a fake payments API: the receipt is the key)."""
    return {"receipt": idempotency_key, "amount": charge.get("amount")}


def _from_input(*fields: str) -> Any:
    return lambda input: {name: (input or {}).get(name) for name in fields}


fraud_check = create_machine(
    {
        "id": "fraud_check",
        "description": "Scores the card; a risky score waits for a person's decision.",
        "initial": "scoring",
        "context": _from_input("order_id", "card", "amount"),
        "states": {
            "scoring": {
                "invoke": {
                    "id": "score",
                    "src": "score_risk",
                    "input": lambda ctx, ev: {"card": ctx["card"], "amount": ctx["amount"]},
                    "onDone": [
                        {"guard": "risky", "target": "awaiting_review", "actions": "keep_score"},
                        {"target": "cleared", "actions": "keep_score"},
                    ],
                    "onError": "rejected",
                }
            },
            "awaiting_review": {
                "description": "A person approves or rejects the payment.",
                "on": {"APPROVE": "cleared", "REJECT": "rejected"},
            },
            "cleared": {"type": "final", "entry": "tell_payment"},
            "rejected": {"type": "final", "failure": "fraud check rejected the card"},
        },
        "output": lambda ctx, ev: {"score": ctx.get("score")},
    },
    actors={"score_risk": from_callable(score_risk)},
    guards={"risky": lambda ctx, ev: ev["output"] >= REVIEW_SCORE},
    actions={
        "keep_score": assign({"score": lambda ctx, ev: ev["output"]}),
        "tell_payment": send_parent(
            lambda ctx, ev: {"type": "FRAUD_CLEARED", "score": ctx.get("score")}
        ),
    },
)

payment = create_machine(
    {
        "id": "payment",
        "description": "Checks the card for fraud, then charges it.",
        "initial": "checking_fraud",
        "context": _from_input("order_id", "card", "amount"),
        "states": {
            "checking_fraud": {
                "invoke": {
                    "id": "fraud_check",
                    "src": "fraud_check",
                    "input": lambda ctx, ev: dict(ctx),
                    "onDone": {"target": "charging", "actions": "keep_risk"},
                    "onError": "refused",
                },
                "on": {"FRAUD_CLEARED": {"actions": "note_cleared"}},
            },
            "charging": {
                "invoke": {
                    "id": "charge",
                    "src": "charge_card",
                    "input": lambda ctx, ev: {"amount": ctx["amount"]},
                    "onDone": {"target": "paid", "actions": "keep_receipt"},
                    "onError": "refused",
                }
            },
            "paid": {"type": "final"},
            "refused": {"type": "final", "failure": "payment refused"},
        },
        "output": lambda ctx, ev: {"receipt": ctx.get("receipt"), "risk": ctx.get("risk")},
    },
    actors={"fraud_check": fraud_check, "charge_card": from_callable(charge_card)},
    actions={
        "keep_risk": assign({"risk": lambda ctx, ev: ev["output"]["score"]}),
        "note_cleared": assign({"cleared_score": lambda ctx, ev: ev["score"]}),
        "keep_receipt": assign({"receipt": lambda c, e: e["output"]["receipt"]}),
    },
)

order = create_machine(
    {
        "id": "order",
        "description": "Takes the payment for an order; a failed payment is handled, not a crash.",
        "initial": "paying",
        "context": _from_input("order_id", "card", "amount"),
        "states": {
            "paying": {
                "invoke": {
                    "id": "payment",
                    "src": "payment",
                    "input": lambda ctx, ev: dict(ctx),
                    "onDone": {"target": "confirmed", "actions": "keep_payment"},
                    "onError": {"target": "payment_failed", "actions": "keep_problem"},
                }
            },
            "confirmed": {"type": "final"},
            "payment_failed": {
                "type": "final",
                "description": "The order stays unpaid; the problem is recorded.",
            },
        },
        "output": lambda ctx, ev: {"receipt": ctx.get("receipt"), "problem": ctx.get("problem")},
    },
    actors={"payment": payment},
    actions={
        "keep_payment": assign({"receipt": lambda ctx, ev: ev["output"]["receipt"]}),
        "keep_problem": assign({"problem": lambda ctx, ev: ev["error"]}),
    },
)

MACHINES: dict[str, Machine] = {m.id: m for m in (order, payment, fraud_check)}

__all__ = ["MACHINES", "charge_card", "fraud_check", "order", "payment", "score_risk"]
