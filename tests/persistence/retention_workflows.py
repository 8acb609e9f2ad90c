"""Workflows for the retention, fork and reset tests (issue 41), importable by worker
subprocesses (`--machines tests.persistence.retention_workflows`).

`LEDGER` is what the outside world saw of the calls made in this process: (call, idempotency
key), in order. `BUG` makes the `PACK` event's action raise (a bug, fixed by clearing it).
"""

from __future__ import annotations

from typing import Any

from statecharts import assign, create_machine

LEDGER: list[tuple[str, str]] = []
BUG: dict[str, bool] = {"pack": False}


def charge(_input: Any, idempotency_key: str) -> str:
    """A payment: one line in the ledger per call."""
    LEDGER.append(("charge", idempotency_key))
    return "charged"


def ship(_input: Any, idempotency_key: str) -> str:
    """A shipment: one line in the ledger per call."""
    LEDGER.append(("ship", idempotency_key))
    return "shipped"


def pack(_context: Any, _event: Any) -> dict[str, Any]:
    """Packing, broken while `BUG["pack"]` is set."""
    if BUG["pack"]:
        raise RuntimeError("packing bug")
    return {"packed": True}


order = create_machine(
    {
        "id": "lc_order",
        "initial": "charging",
        "context": {"packed": False},
        "states": {
            "charging": {"invoke": {"src": "charge", "onDone": "shipping"}},
            "shipping": {"invoke": {"src": "ship", "onDone": "packing"}},
            "packing": {"on": {"PACK": {"target": "done", "actions": assign(pack)}}},
            "done": {"type": "final"},
        },
    },
    actors={"charge": charge, "ship": ship},
)
"""Charge, ship (two calls with side effects), then wait for PACK."""

quick = create_machine(
    {
        "id": "lc_quick",
        "initial": "working",
        "states": {
            "working": {"invoke": {"src": "charge", "onDone": "done"}},
            "done": {"type": "final"},
        },
    },
    actors={"charge": charge},
)
"""One call, then done: runs a purge can take as soon as a worker has finished them."""

parent = create_machine(
    {
        "id": "lc_parent",
        "initial": "waiting",
        "context": {"pings": 0},
        "states": {
            "waiting": {
                "invoke": {"id": "kid", "src": "lc_child", "onDone": "done"},
                "on": {"PING": {"actions": assign({"pings": lambda c, e: c["pings"] + 1})}},
            },
            "done": {"type": "final"},
        },
    },
    actors={
        "lc_child": create_machine(
            {
                "id": "lc_child",
                "initial": "open",
                "states": {"open": {"on": {"FINISH": "closed"}}, "closed": {"type": "final"}},
            }
        )
    },
)
"""A parent waiting for a child run that ends when sent FINISH (PING: a step meanwhile)."""

MACHINES = [order, quick, parent]
