"""Run inside a fresh venv with the ``yaml`` extra: a machine read from a YAML file (PyYAML)
runs; prints its final state and context as JSON."""

import json
import sys

from statecharts import assign, create_actor, load_machine

machine = load_machine(
    sys.argv[1],
    guards={"has_items": lambda ctx, ev: ctx["items"] > 0},
    actions={"count": assign({"items": lambda ctx, ev: ctx["items"] + 1})},
)
actor = create_actor(machine).start()
for event in ("CHECKOUT", "ADD", "CHECKOUT"):
    actor.send(event)
snapshot = actor.get_snapshot()
print(
    json.dumps(
        {"value": snapshot.value, "status": snapshot.status, "context": dict(snapshot.context)}
    )
)
