"""Workflows used by the persistence tests, importable by worker subprocesses
(`--machines tests.persistence.workflows`).

Every side effect is written to a ledger (an SQLite file named by STATECHARTS_TEST_LEDGER) so a
test can check from outside what really ran: each call with its idempotency key and process id,
and a "payments API" that, like a real one, charges once per idempotency key.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import time
from typing import Any

from persistence.outbox import current_run_id
from statecharts import assign, create_machine, emit

LEDGER_ENV = "STATECHARTS_TEST_LEDGER"
SLOW_ENV = "STATECHARTS_TEST_EFFECT_MS"  # make each effect take this long (widens crash windows)


def init_ledger(path: str) -> None:
    """Create the ledger tables."""
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(
            "CREATE TABLE IF NOT EXISTS calls (name text, key text, pid integer, "
            "started real, ended real, run text)"
        )
        db.execute("CREATE TABLE IF NOT EXISTS charges (key text PRIMARY KEY, amount integer)")


def _ledger() -> sqlite3.Connection:
    path = os.environ.get(LEDGER_ENV)
    if not path:
        raise RuntimeError(f"{LEDGER_ENV} is not set")
    return sqlite3.connect(path, timeout=60, isolation_level=None)


def _call(name: str, key: str, work: Any = None) -> None:
    """Record a call's start and end around `work()`; sleep per SLOW_ENV inside it."""
    db = _ledger()
    try:
        cursor = db.execute(
            "INSERT INTO calls (name, key, pid, started, run) VALUES (?, ?, ?, ?, ?)",
            (name, key, os.getpid(), time.time(), current_run_id()),
        )
        row = cursor.lastrowid
        delay_ms = int(os.environ.get(SLOW_ENV, "0"))
        if delay_ms:
            time.sleep(delay_ms / 1000)
        if work is not None:
            work(db)
        db.execute("UPDATE calls SET ended = ? WHERE rowid = ?", (time.time(), row))
    finally:
        db.close()


def charge(amount: int, idempotency_key: str) -> dict[str, Any]:
    """A payment: charged at most once per idempotency key, like a real payments API."""
    _call(
        "charge",
        idempotency_key,
        lambda db: db.execute(
            "INSERT OR IGNORE INTO charges (key, amount) VALUES (?, ?)", (idempotency_key, amount)
        ),
    )
    return {"receipt": idempotency_key, "amount": amount}


def reserve(order: Any, idempotency_key: str) -> str:
    """Reserve stock (records the call)."""
    _call("reserve", idempotency_key)
    return "reserved"


def ship(order: Any, idempotency_key: str) -> str:
    """Ship (records the call)."""
    _call("ship", idempotency_key)
    return "shipped"


def notify(context: Any, event: Any, idempotency_key: str) -> None:
    """A plain action with a side effect."""
    _call("notify", idempotency_key)


order = create_machine(
    {
        "id": "order",
        "initial": "charging",
        "context": lambda input: {"amount": (input or {}).get("amount", 1), "receipt": None},
        "states": {
            "charging": {
                "invoke": {
                    "id": "charge",
                    "src": "charge",
                    "input": lambda c, e: c["amount"],
                    "onDone": {"target": "reserving", "actions": "save_receipt"},
                }
            },
            "reserving": {"invoke": {"id": "reserve", "src": "reserve", "onDone": "cooling"}},
            "cooling": {"after": {"30": "shipping"}},
            "shipping": {
                "entry": ["notify"],
                "invoke": {"id": "ship", "src": "ship", "onDone": "shipped"},
            },
            "shipped": {"type": "final", "entry": ["announce"]},
        },
    },
    actors={"charge": charge, "reserve": reserve, "ship": ship},
    actions={
        "save_receipt": assign({"receipt": lambda c, e: e["output"]["receipt"]}),
        "notify": notify,
        "announce": emit(lambda c, e: {"type": "order.shipped", "amount": c["amount"]}),
    },
)
"""charge -> reserve -> wait 30 ms -> notify + ship -> done: four side effects per run."""


paying = create_machine(
    {
        "id": "order",
        "initial": "paying",
        "context": lambda input: {"amount": (input or {}).get("amount", 1)},
        "states": {
            "paying": {"entry": "pay", "always": "cooling"},
            "cooling": {"after": {"5000": "shipped"}},
            "shipped": {"type": "final"},
        },
    },
    actions={"pay": lambda c, e, idempotency_key: charge(c["amount"], idempotency_key)},
)
"""An order whose charge is an action, made in its run's step under the run's lease (every
invoked call runs beside its run), then a 5 s cooling timer: for tests of what a run's lease
does while its step's effects run."""


approval = create_machine(
    {
        "id": "approval",
        "initial": "waiting",
        "context": {"approved_by": None},
        "states": {
            "waiting": {
                "on": {
                    "APPROVE": {
                        "target": "approved",
                        "actions": assign({"approved_by": lambda c, e: e.get("by")}),
                    },
                    "REJECT": "rejected",
                },
                "after": {"86400000": "expired"},
            },
            "approved": {"type": "final"},
            "rejected": {"type": "final"},
            "expired": {"type": "final"},
        },
    }
)
"""Waits for an outside event, or expires after a day (a durable timer)."""


class Unavailable(Exception):
    """The payments API is down (retryable)."""


def flaky_charge(amount: int, idempotency_key: str) -> dict[str, Any]:
    """Fails on the first call for a key, then charges once per key."""
    db = _ledger()
    try:
        seen = db.execute(
            "SELECT count(*) FROM calls WHERE key = ?", (idempotency_key,)
        ).fetchone()[0]
    finally:
        db.close()
    if seen == 0:
        _call("flaky_charge", idempotency_key)
        raise Unavailable("payments API unavailable")
    return charge(amount, idempotency_key)


RETRY_WAIT_MS = 3000

retrying = create_machine(
    {
        "id": "retrying",
        "initial": "charging",
        "context": {"receipt": None},
        "states": {
            "charging": {
                "invoke": {
                    "id": "charge",
                    "src": "flaky_charge",
                    "input": 5,
                    "retry": {
                        "max_attempts": 3,
                        "initial_interval": RETRY_WAIT_MS,
                        "backoff": "fixed",
                    },
                    "onDone": {"target": "paid", "actions": "save_receipt"},
                }
            },
            "paid": {"type": "final"},
        },
    },
    actors={"flaky_charge": flaky_charge},
    actions={"save_receipt": assign({"receipt": lambda c, e: e["output"]["receipt"]})},
)
"""One call that fails once and is retried after a durable 3 s wait."""


def _slowed(fn: Any) -> Any:
    """`fn` taking SLOW_ENV ms longer (widens the crash windows of the child-run crash test)."""

    @functools.wraps(fn)  # the same signature: a key only for those that take one
    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(int(os.environ.get(SLOW_ENV, "0")) / 1000)
        return fn(*args, **kwargs)

    return slow


def _slow_orders() -> list[Any]:
    """`machines.orders`' tree with slowed calls (same definitions, same fingerprints)."""
    from machines import orders
    from statecharts import from_callable

    fraud = orders.fraud_check.provide(
        actors={"score_risk": from_callable(_slowed(orders.score_risk))}
    )
    payment = orders.payment.provide(
        actors={"fraud_check": fraud, "charge_card": from_callable(_slowed(orders.charge_card))}
    )
    return [orders.order.provide(actors={"payment": payment}), payment, fraud]


SLOW_ORDERS = _slow_orders()
"""The order -> payment -> fraud_check tree, slowed (`--machines
tests.persistence.workflows:SLOW_ORDERS`)."""


def record_payment(context: Any, event: Any, idempotency_key: str) -> None:
    """A payment webhook's side effect (one ledger call per applied event)."""
    _call("payment", idempotency_key)


payments = create_machine(
    {
        "id": "payments",
        "initial": "open",
        "context": {"paid": 0},
        "states": {
            "open": {
                "on": {
                    "payment_intent.succeeded": {"actions": ["count", "record_payment"]},
                    "CLOSE": "closed",
                },
            },
            "closed": {"type": "final"},
        },
    },
    actions={
        "count": assign({"paid": lambda c, e: c["paid"] + 1}),
        "record_payment": record_payment,
    },
)
"""Takes payment webhooks (Stripe's event type) until closed: each applied one counts and runs
one side effect, so an event applied twice shows."""

fulfilment = create_machine(
    {
        "id": "fulfilment",
        "initial": "placed",
        "context": lambda input: {"order_id": input["order_id"]},
        "states": {"placed": {"on": {"SHIP": "shipped"}}, "shipped": {"type": "final"}},
    }
)
"""Reads `order_id` from its input: an input without it cannot start a run."""
