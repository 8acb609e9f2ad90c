"""Workflows for the telemetry tests, importable by worker subprocesses
(`--machines tests.telemetry.workflows`).

`signup`: a webhook starts it; it registers the user (an invoked call), waits on a durable timer,
sends a welcome mail (an invoked call that blocks for ever in a worker started with
STATECHARTS_TEST_BLOCK=1, so that worker can be SIGKILLed inside it), waits for the user's
CONFIRM event, then archives (a plain action) and ends. Every call is written to the file named
by STATECHARTS_TEST_CALLS (one line: name, key, pid) so a test counts what really ran.

`billing`: runs that end `done`, end `error` (a call that fails for good), retry once, or wait
for an event, for the metrics test.
"""

from __future__ import annotations

import os
import time
from typing import Any

from statecharts import create_machine

CALLS_ENV = "STATECHARTS_TEST_CALLS"
BLOCK_ENV = "STATECHARTS_TEST_BLOCK"
TIMER_MS = 1500


def _record(name: str, key: str) -> None:
    path = os.environ.get(CALLS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{name} {key} {os.getpid()}\n")


def _calls() -> str:
    path = os.environ.get(CALLS_ENV)
    if not path or not os.path.exists(path):
        return ""
    with open(path, encoding="utf-8") as f:
        return f.read()


def register(user: Any, idempotency_key: str) -> dict[str, Any]:
    """The first call: creates the account."""
    _record("register", idempotency_key)
    return {"account": f"acct-{user}"}


def send_welcome(account: Any, idempotency_key: str) -> str:
    """The mail: blocks for ever where STATECHARTS_TEST_BLOCK=1 (to be SIGKILLed there)."""
    _record("send_welcome", idempotency_key)
    if os.environ.get(BLOCK_ENV) == "1":
        while True:
            time.sleep(1)
    return "sent"


def archive(context: Any, event: Any, idempotency_key: str) -> None:
    """The last side effect, a plain action."""
    _record("archive", idempotency_key)


signup = create_machine(
    {
        "id": "signup",
        "initial": "registering",
        "context": lambda input: {"user": (input or {}).get("user"), "account": None},
        "states": {
            "registering": {
                "invoke": {
                    "id": "register",
                    "src": "register",
                    "input": lambda c, e: c["user"],
                    "onDone": {"target": "cooling_off", "actions": "keep_account"},
                }
            },
            "cooling_off": {"after": {str(TIMER_MS): "welcoming"}},
            "welcoming": {
                "invoke": {
                    "id": "welcome",
                    "src": "send_welcome",
                    "input": lambda c, e: c["account"],
                    "onDone": "confirming",
                }
            },
            "confirming": {"on": {"CONFIRM": "archived"}},
            "archived": {"type": "final", "entry": "archive"},
        },
    },
    actors={"register": register, "send_welcome": send_welcome},
    actions={"archive": archive, "keep_account": lambda c, e: None},
)
"""register -> wait 1.5 s -> send_welcome -> wait for CONFIRM -> archive: three side effects."""


class Declined(Exception):
    """The card was declined (not retryable)."""


class Flaky(Exception):
    """The ledger timed out (retryable)."""


def charge(amount: Any, idempotency_key: str) -> str:
    """Declines amounts over 100; times out once for amounts ending in 7, then succeeds."""
    _record("charge", idempotency_key)
    if amount > 100:
        raise Declined(f"amount {amount} declined")
    if amount % 10 == 7 and _calls().count(f"charge {idempotency_key} ") == 1:
        raise Flaky("ledger timed out")
    return "charged"


billing = create_machine(
    {
        "id": "billing",
        "initial": "charging",
        "context": lambda input: {"amount": input["amount"], "hold": input.get("hold", False)},
        "states": {
            "charging": {
                "invoke": {
                    "id": "charge",
                    "src": "charge",
                    "input": lambda c, e: c["amount"],
                    "retry": {
                        "max_attempts": 2,
                        "initial_interval": 50,
                        "backoff": "fixed",
                        "non_retryable": ["Declined"],
                    },
                    "onDone": "deciding",
                }
            },
            "deciding": {"always": [{"guard": "held", "target": "on_hold"}, {"target": "paid"}]},
            "on_hold": {"on": {"RELEASE": "paid"}},
            "paid": {"type": "final"},
        },
    },
    actors={"charge": charge},
    guards={"held": lambda c, e: bool(c["hold"])},
)
"""charge (declined over 100, retried once when it times out) -> paid, or on hold until
RELEASE."""
