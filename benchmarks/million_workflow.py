"""The workflows of the million-run benchmark (`benchmarks/million.py`), loaded by its worker
processes (`--machines benchmarks.million_workflow`).

- `timer`: asleep on a durable timer due at the instant in its input (`due_at`, epoch ms), then
  one step to its final state, which records when it fired;
- `waiter`: waits for a `go` event (no timer), then ends.
"""

from __future__ import annotations

from typing import Any

from statecharts import assign, create_machine

timer = create_machine(
    {
        "id": "timer",
        "initial": "sleeping",
        "context": lambda input: {"due_at": input["due_at"], "created": input["created"]},
        "states": {
            "sleeping": {
                "after": {"until_due": {"target": "fired", "actions": "note_fired"}},
            },
            "fired": {"type": "final"},
        },
    },
    actions={"note_fired": assign({"fired": lambda context, event: True})},
    # due at `due_at` exactly: the delay counts from the creation instant
    delays={"until_due": lambda context, event: context["due_at"] - context["created"]},
)

waiter = create_machine(
    {
        "id": "waiter",
        "initial": "waiting",
        "context": lambda input: {"order": input["order"]},
        "states": {
            "waiting": {"on": {"go": "done"}},
            "done": {"type": "final"},
        },
    }
)

MACHINES: list[Any] = [timer, waiter]
