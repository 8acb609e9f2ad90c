"""Run inside a fresh venv with the ``interop`` extra: a python-statemachine class imported as
a statechart runs the same steps. Prints the visited states as JSON."""

import json

from statemachine import State, StateChart

from statecharts import create_actor
from statecharts.testing.interop import from_python_statemachine


class Traffic(StateChart):
    green = State(initial=True)
    yellow = State()
    red = State(final=True)
    slow = green.to(yellow)
    stop = yellow.to(red)


theirs = Traffic()
actor = create_actor(from_python_statemachine(Traffic).create_machine()).start()
visited = []
for event in ("slow", "stop"):
    theirs.send(event)
    actor.send(event)
    visited.append([sorted(s.id for s in theirs.configuration), actor.get_snapshot().value])
print(json.dumps({"visited": visited, "status": actor.get_snapshot().status}))
