"""Workflows for the fault-injection suite (`tests/persistence/test_fault_injection.py`),
importable by worker subprocesses (`--machines tests.persistence.faulty`).

Every side effect is recorded in the ledger (tests.persistence.workflows: an SQLite file named by
STATECHARTS_TEST_LEDGER) with its idempotency key and its run (`current_run_id()`), so a
test counts from outside how many times each side effect of each run really ran. Faults are
switched on and off through the ledger's `switches` table, so a test can "repair" the outside
world while workers run.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from statecharts import assign, create_machine
from tests.persistence.workflows import _call, _ledger

VERSION_ENV = "STATECHARTS_TEST_VERSION"  # the `versioned` machine's version in this process

POISONS: dict[str, Any] = {
    "big_int": 2**70,
    "lone_surrogate": "\ud800",
    "nul_in_string": "a\x00b",
    "nul_in_key": {"a\x00b": 1},
    "nan": float("nan"),
}
"""Values some store cannot hold exactly, returned by an invoked function."""


def switch(name: str) -> bool:
    """Whether fault `name` is on (set with `set_switch` from the test)."""
    db = _ledger()
    try:
        db.execute("CREATE TABLE IF NOT EXISTS switches (name text PRIMARY KEY, dflt integer)")
        row = db.execute("SELECT dflt FROM switches WHERE name = ?", (name,)).fetchone()
    finally:
        db.close()
    return bool(row and row[0])


def set_switch(name: str, on: bool) -> None:
    """Turn fault `name` on or off."""
    db = _ledger()
    try:
        db.execute("CREATE TABLE IF NOT EXISTS switches (name text PRIMARY KEY, dflt integer)")
        db.execute(
            "INSERT INTO switches VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET "
            "dflt = excluded.dflt",
            (name, int(on)),
        )
    finally:
        db.close()


def calls(name: str, run_id: str = "") -> int:
    """How many times side effect `name` ran (for run `run_id`, when given)."""
    db = _ledger()
    try:
        row = db.execute(
            "SELECT count(*) FROM calls WHERE name = ? AND coalesce(run, '') LIKE ?",
            (name, run_id + "%"),
        ).fetchone()
    finally:
        db.close()
    return int(row[0])


def _attempts(name: str, key: str) -> int:
    db = _ledger()
    try:
        return int(
            db.execute(
                "SELECT count(*) FROM calls WHERE name = ? AND key = ?", (name, key)
            ).fetchone()[0]
        )
    finally:
        db.close()


# -- poison values -------------------------------------------------------------------------


def produce(kind: str, idempotency_key: str) -> Any:
    """Returns the poison of `kind` ("fine": a harmless value)."""
    _call("produce", idempotency_key)
    return POISONS.get(kind, 1)


def record(value: Any, idempotency_key: str) -> str:
    """The side effect after the value was stored."""
    _call("record", idempotency_key)
    return "recorded"


poison = create_machine(
    {
        "id": "poison",
        "initial": "producing",
        "context": lambda input: {"kind": (input or {}).get("kind", "fine"), "value": None},
        "states": {
            "producing": {
                "invoke": {
                    "src": "produce",
                    "input": lambda c, e: c["kind"],
                    "onDone": {"target": "recording", "actions": "keep"},
                },
            },
            "recording": {
                "invoke": {"src": "record", "input": lambda c, e: c["value"], "onDone": "done"},
            },
            "done": {"type": "final"},
        },
    },
    actors={"produce": produce, "record": record},
    actions={
        "keep": assign(
            {
                # kind "assign": the output is fine, the value the assign computes is not
                "value": lambda c, e: e["output"] * 2**70 if c["kind"] == "assign" else e["output"],
            }
        )
    },
)
"""produce -> (assign) -> record -> done; a poison fails the run at produce."""


# -- rows and events ---------------------------------------------------------------------

parked = create_machine(
    {
        "id": "parked",
        "initial": "waiting",
        "states": {
            "waiting": {"on": {"GO": "recording"}},
            "recording": {"invoke": {"src": "record", "onDone": "done"}},
            "done": {"type": "final"},
        },
    },
    actors={"record": record},
)
"""Waits for GO, then one side effect."""


DEADLINE_MS = 2000
"""How long a `deadline` run waits for its payment."""


def lapse(value: Any, idempotency_key: str) -> str:
    """The side effect of a missed deadline (a reminder, a cancelled order)."""
    _call("lapse", idempotency_key)
    return "lapsed"


deadline = create_machine(
    {
        "id": "deadline",
        "initial": "waiting",
        "states": {
            "waiting": {"after": {str(DEADLINE_MS): "lapsing"}, "on": {"PAY": "paying"}},
            "paying": {"invoke": {"src": "record", "onDone": "paid"}},
            "paid": {"type": "final"},
            "lapsing": {"invoke": {"src": "lapse", "onDone": "lapsed"}},
            "lapsed": {"type": "final"},
        },
    },
    actors={"record": record, "lapse": lapse},
)
"""Waits `DEADLINE_MS` for PAY (then one side effect, `record`), else lapses (`lapse`)."""


versioned = create_machine(
    {
        "id": "versioned",
        "version": os.environ.get(VERSION_ENV, "1"),
        "initial": "waiting",
        "states": {
            "waiting": {"on": {"GO": "recording"}},
            "recording": {"invoke": {"src": "record", "onDone": "done"}},
            "done": {"type": "final"},
        },
    },
    actors={"record": record},
)
"""The same shape in every version; only the `version` label (from the environment) differs."""


# -- transient and fatal failures --------------------------------------------------------


class DatabaseError(Exception):
    """An internal database operation failed (the seed's "roll back and pick up again")."""


class Deadlock(DatabaseError):
    """A subclass: matched by the base class name."""


def db_write(fails: int, idempotency_key: str) -> str:
    """Fails with a transient database error on its first `fails` calls for a key."""
    attempt = _attempts("db_write", idempotency_key) + 1
    _call("db_write", idempotency_key)
    if attempt <= fails:
        raise Deadlock(f"deadlock detected (attempt {attempt})")
    return "written"


def bad_write(value: Any, idempotency_key: str) -> str:
    """Fails with an error that is not transient: the normal error path."""
    _call("bad_write", idempotency_key)
    raise ValueError("constraint violated")


transient = create_machine(
    {
        "id": "transient",
        "initial": "writing",
        "context": lambda input: {"fails": (input or {}).get("fails", 0)},
        "states": {
            "writing": {
                "invoke": {
                    "src": "db_write",
                    "input": lambda c, e: c["fails"],
                    "transient": ["DatabaseError"],
                    "onDone": "checking",
                    "onError": "failed",
                },
            },
            "checking": {
                "invoke": {
                    "src": "bad_write",
                    "transient": ["DatabaseError"],
                    "onDone": "written",
                    "onError": "rejected",
                },
            },
            "written": {"type": "final"},
            "rejected": {"type": "final"},
            "failed": {"type": "final", "failure": True},
        },
    },
    actors={"db_write": db_write, "bad_write": bad_write},
)
"""db_write fails transiently `fails` times (rolled back, picked up again), then bad_write fails
for real (onError, once)."""


# -- resume ---------------------------------------------------------------------------------


class Broken(Exception):
    """The outside world is broken until the test repairs it."""


def fragile(value: Any, idempotency_key: str) -> str:
    """Fails while the `broken` switch is on."""
    _call("fragile", idempotency_key)
    if switch("broken"):
        raise Broken("downstream is broken")
    return "ok"


def fragile_action(context: Any, event: Any, idempotency_key: str) -> None:
    """An action that raises while the `action_broken` switch is on."""
    _call("fragile_action", idempotency_key)
    if switch("action_broken"):
        raise Broken("downstream is broken")


resumable = create_machine(
    {
        "id": "resumable",
        "initial": "calling",
        "states": {
            # no onError: the failure fails the machine (its snapshot ends `error`)
            "calling": {"invoke": {"src": "fragile", "onDone": "acting"}},
            # an action that raises fails the run (its snapshot stays active)
            "acting": {"entry": ["fragile_action"], "after": {"0": "done"}},
            "done": {"type": "final"},
        },
    },
    actors={"fragile": fragile},
    actions={"fragile_action": fragile_action},
)


# -- failure finals ---------------------------------------------------------------------------


class CardDeclined(Exception):
    """The card issuer said no."""


def charge_card(amount: Any, idempotency_key: str) -> str:
    """Always declined."""
    _call("charge_card", idempotency_key)
    raise CardDeclined("card declined by issuer")


def page_oncall(failure: Any, idempotency_key: str) -> str:
    """The error workflow's side effect."""
    _call("page_oncall", idempotency_key)
    return "paged"


refund = create_machine(
    {
        "id": "refund",
        "initial": "charging",
        "meta": {"error_workflow": "refund_failed"},
        "states": {
            "charging": {"invoke": {"src": "charge_card", "onDone": "paid", "onError": "declined"}},
            "paid": {"type": "final"},
            "declined": {"type": "final", "failure": "card declined"},
        },
    },
    actors={"charge_card": charge_card},
)
"""A handled failure that is still a failure: the run ends `error`, its error workflow starts."""

refund_failed = create_machine(
    {
        "id": "refund_failed",
        "initial": "paging",
        "context": lambda input: {"failure": input},
        "states": {
            "paging": {
                "invoke": {
                    "src": "page_oncall",
                    "input": lambda c, e: c["failure"],
                    "onDone": "paged",
                }
            },
            "paged": {"type": "final"},
        },
    },
    actors={"page_oncall": page_oncall},
)


# -- a thread that dies ----------------------------------------------------------------------


def exits(value: Any, idempotency_key: str) -> str:
    """User code that ends its thread (SystemExit passes every `except Exception`)."""
    _call("exits", idempotency_key)
    raise SystemExit(3)


killer = create_machine(
    {
        "id": "killer",
        "initial": "calling",
        "states": {
            "calling": {"invoke": {"src": "exits", "onDone": "done"}},
            "done": {"type": "final"},
        },
    },
    actors={"exits": exits},
)


# -- child runs the database cannot hold --------------------------------------------------

kid = create_machine({"id": "kid", "initial": "done", "states": {"done": {"type": "final"}}})
LONG_ID = "kid_" + "".join(hashlib.sha256(str(n).encode()).hexdigest() for n in range(44))
"""A machine id PostgreSQL cannot put in an index row (its btree limit is 2,704 bytes): 2,820
bytes that do not compress (a repetitive one would, and fit)."""
long_named_kid = create_machine(
    {"id": LONG_ID, "initial": "done", "states": {"done": {"type": "final"}}}
)


KID_INVOKE = "kid_" + "i" * 500
"""The invoke id of a spawner's child: a child's key is `<parent key>/<invoke id>`, so a parent
key of 500 bytes (one `start` takes) derives a child key over 1,000."""


def _spawner(name: str, child: Any) -> Any:
    """produce -> a child run (invoke id KID_INVOKE) -> done: the child is created by a
    worker's step, not by the start."""
    return create_machine(
        {
            "id": name,
            "initial": "producing",
            "states": {
                "producing": {"invoke": {"src": "produce", "input": "fine", "onDone": "spawning"}},
                "spawning": {"invoke": {"id": KID_INVOKE, "src": "kid", "onDone": "done"}},
                "done": {"type": "final"},
            },
        },
        actors={"produce": produce, "kid": child},
    )


spawner = _spawner("spawner", kid)
long_spawner = _spawner("long_spawner", long_named_kid)

MACHINES = [
    poison,
    parked,
    deadline,
    versioned,
    transient,
    resumable,
    refund,
    refund_failed,
    killer,
    spawner,
    long_spawner,
]
