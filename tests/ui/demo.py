"""Demo workflows and data for the UI tests and the screenshots in docs/ui.md.

Importable by the UI and worker subprocesses (`--machines tests.ui.demo`). `fill(url)` puts
runs in every interesting situation into a store: waiting for approval, stuck for hours,
waiting to retry a call that times out, failed, cancelled, finished, and one whose context holds
an injected `<script>` (and a secret-looking key the pages must hide).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from persistence.runtime import Runtime
from persistence.stores import open_store
from persistence.worker import Worker
from statecharts import SimulatedClock, assign, create_machine

HOUR = 3_600_000
MINUTE = 60_000


class CardDeclined(Exception):
    """The payment provider refused the card (not worth retrying)."""


def charge_card(input: Any = None) -> dict[str, Any]:
    """A stand-in payment call: the card in the input decides how it goes."""
    card = (input or {}).get("card", "ok")
    if card == "declined":
        raise CardDeclined("card declined by issuer")
    if card == "slow":
        raise TimeoutError("payment provider did not answer within 10 s")
    return {"receipt": f"r-{card}"}


ORDER = create_machine(
    {
        "id": "order",
        "initial": "awaiting_payment",
        "context": lambda input: {"customer": None, "amount": 0, "card": None, **(input or {})},
        "states": {
            "awaiting_payment": {
                "on": {
                    "PAY": {
                        "target": "charging_card",
                        "actions": assign({"card": lambda c, e: e.get("card", "ok")}),
                    }
                },
                "description": "waits for the customer to pay",
            },
            "charging_card": {
                "invoke": {
                    "src": "charge_card",
                    "input": lambda c, e: {"card": c.get("card", "ok")},
                    "retry": {
                        "max_attempts": 5,
                        "initial_interval": 6 * HOUR,
                        "backoff": "exponential",
                        "non_retryable": ["CardDeclined"],
                    },
                    "onDone": "awaiting_approval",
                },
            },
            "awaiting_approval": {
                "on": {"APPROVE": "shipped", "REJECT": "rejected"},
                "description": "a person checks the order",
            },
            "shipped": {"type": "final"},
            "rejected": {"type": "final"},
        },
    },
    actors={"charge_card": charge_card},
)

ONBOARDING = create_machine(
    {
        "id": "onboarding",
        "initial": "collecting",
        "context": {"user": None},
        "states": {
            "collecting": {
                "type": "parallel",
                "onDone": "welcome",
                "states": {
                    "documents": {
                        "initial": "requested",
                        "states": {
                            "requested": {"on": {"DOCS_RECEIVED": "checked"}},
                            "checked": {"type": "final"},
                        },
                    },
                    "contract": {
                        "initial": "sent",
                        "states": {
                            "sent": {"on": {"SIGNED": "signed"}},
                            "signed": {"type": "final"},
                        },
                    },
                },
            },
            "welcome": {"type": "final"},
        },
    }
)

MACHINES = [ORDER, ONBOARDING]


@dataclass(frozen=True)
class Demo:
    """Ids of the demo runs, by what they show."""

    waiting: list[str]  # order runs waiting for approval (recent)
    stuck: str  # waiting for approval, untouched for hours
    retrying: str  # charge call timed out; waiting hours to retry
    failed: str  # card declined
    scripted: str  # context holds "<script>" and a secret
    onboarding: list[str]


def fill(url: str, extra_orders: int = 0) -> Demo:
    """Create the demo runs in the store at `url` (migrated here); return their ids."""
    store = open_store(url, migrate=True)
    now = int(time.time() * 1000)
    clock = SimulatedClock(now - 5 * HOUR)
    runtime = Runtime(store, MACHINES, clock=clock)
    worker = Worker(runtime, worker_id="demo-filler")

    def order(
        customer: str, amount: int, *, pay: str | None, key: str | None = None, **context: Any
    ) -> str:
        run_id = runtime.start("order", {"customer": customer, "amount": amount, **context}, key)
        if pay is not None:
            runtime.send(run_id, {"type": "PAY", "card": pay})
        worker.run_until_idle()
        return run_id

    stuck = order("Ada Lovelace", 120, pay="ok", key="order-1001")
    clock.set(now - 2 * HOUR)
    failed = order("Grace Hopper", 80, pay="declined", key="order-1002")
    retrying = order("Alan Turing", 310, pay="slow", key="order-1003")
    clock.set(now - 40 * MINUTE)
    cancelled = order("Edsger Dijkstra", 45, pay=None, key="order-1004")
    runtime.cancel(cancelled, "customer changed their mind")
    done = order("Barbara Liskov", 99, pay="ok", key="order-1005")
    runtime.send(done, "APPROVE")
    worker.run_until_idle()
    clock.set(now - 30 * MINUTE)
    onboarding = [runtime.start("onboarding", key=f"user-{i}") for i in range(4)]
    runtime.send(onboarding[0], "SIGNED")
    runtime.send(onboarding[1], "DOCS_RECEIVED")
    worker.run_until_idle()
    clock.set(now - 12 * MINUTE)
    waiting = [order(f"Customer {i}", 20 + i, pay="ok", key=f"order-{1100 + i}") for i in range(6)]
    waiting.append(order("Linus T.", 12, pay=None, key="order-1200"))
    scripted = order(
        "<script>alert('owned')</script>",
        1,
        pay="ok",
        key="order-1300",
        note="<img src=x onerror=alert(1)>",
        api_token="s3cr3t-value",
    )
    for i in range(extra_orders):
        order(f"Bulk {i}", i, pay=None)
    store.close()
    return Demo(waiting, stuck, retrying, failed, scripted, onboarding)
