"""A workflow that carries a marked secret through every payload column (issue 42): its input
and context, a call's input, heartbeat details and output, an outbox effect's payload and
result, events sent to it, to its child run and back, a dead letter, its journal and output.
"""

from __future__ import annotations

import time
from typing import Any

from persistence.outbox import heartbeat
from statecharts import assign, create_machine, emit, send_parent, send_to

SECRET = "SeCrEt-4111-1111-1111-1111-marked"
"""Plaintext that must never be found in the database when payloads are encrypted."""


def tokenize(request: dict[str, Any], idempotency_key: str = "") -> dict[str, Any]:
    """A call: its input, heartbeat details and output all hold the card; it takes
    `hold_s` seconds (so that its worker's heartbeat stores the details)."""
    heartbeat({"card": request["card"]})
    time.sleep(request["hold_s"])
    return {"token": f"tok[{request['card']}]"}


def audit(context: Any, event: Any, idempotency_key: str = "") -> dict[str, Any]:
    """A recorded action: its result holds the card."""
    return {"audited": context["card"]}


keeper = create_machine(
    {
        "id": "keeper",
        "initial": "holding",
        "context": lambda input: {"card": (input or {}).get("card"), "heard": []},
        "states": {
            "holding": {"on": {"PING": {"actions": ["hear", "answer"]}, "QUIT": "quit"}},
            "quit": {"type": "final"},
        },
        "output": lambda c, e: {"heard": c["heard"], "card": c["card"]},
    },
    actions={
        "hear": assign({"heard": lambda c, e: [*c["heard"], e["secret"]]}),
        "answer": send_parent(lambda c, e: {"type": "PONG", "secret": e["secret"]}),
    },
)
"""The child run: hears the secret from its parent and answers with it."""

vault = create_machine(
    {
        "id": "vault",
        "initial": "tokenizing",
        "context": lambda input: {
            "card": input["card"],
            "hold_s": input.get("hold_s", 0),
            "token": None,
            "pong": None,
            "kept": None,
            "note": None,
        },
        "states": {
            "tokenizing": {
                "invoke": {
                    "id": "tokenize",
                    "src": "tokenize",
                    "input": lambda c, e: {"card": c["card"], "hold_s": c["hold_s"]},
                    "onDone": {"target": "talking", "actions": "save_token"},
                }
            },
            "talking": {
                "entry": ["audit", "announce"],
                "invoke": {
                    "id": "keeper",
                    "src": "keeper",
                    "input": lambda c, e: {"card": c["card"]},
                    "onDone": {"target": "waiting", "actions": "keep_output"},
                },
                "on": {
                    "PONG": {"actions": "save_pong"},
                    "TELL": {
                        "actions": send_to(
                            "keeper", lambda c, e: {"type": "PING", "secret": e["secret"]}
                        )
                    },
                    "STRAY": {
                        "actions": send_to(
                            "nobody", lambda c, e: {"type": "PING", "secret": c["card"]}
                        )
                    },
                    "BYE": {"actions": send_to("keeper", {"type": "QUIT"})},
                },
            },
            "waiting": {"on": {"NOTE": {"target": "done", "actions": "save_note"}}},
            "done": {"type": "final"},
        },
        "output": lambda c, e: {"card": c["card"], "note": c["note"]},
    },
    actors={"tokenize": tokenize, "keeper": keeper},
    actions={
        "save_token": assign({"token": lambda c, e: e["output"]["token"]}),
        "audit": audit,
        "announce": emit(lambda c, e: {"type": "vault.ready", "card": c["card"]}),
        "save_pong": assign({"pong": lambda c, e: e["secret"]}),
        "keep_output": assign({"kept": lambda c, e: e["output"]}),
        "save_note": assign({"note": lambda c, e: e["text"]}),
    },
)
"""tokenizing (a call) -> talking (an action, an emit, a child run spoken to and answering,
a stray event dead-lettered) -> waiting (the child's output kept) -> NOTE -> done."""

MACHINES = [vault]
