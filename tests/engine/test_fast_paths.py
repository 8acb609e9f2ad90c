"""The engine's shortcuts (configuration moves, context-only events) must be invisible: the
same events give the same snapshots and effects with them switched off."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from statecharts import assign, create_machine, raise_, snapshot_to_json, state_in

EVENTS = ["t1", "t2", "leave", "enter", "inc", "dec", "note", "nothing", "reset"]


def build() -> Any:
    return create_machine(
        {"id": "h", "initial": "work", "context": {"n": 0},
         "states": {
             "work": {"initial": "p", "on": {"leave": "idle",
                                              "inc": {"guard": "small", "actions": "inc"}},
                      "states": {"p": {"type": "parallel", "states": {
                          "r1": {"initial": "a", "states": {"a": {"on": {"t1": "b"}},
                                                            "b": {"on": {"t1": "a"}}}},
                          "r2": {"initial": "c", "states": {"c": {"on": {"t2": "d"}},
                                                            "d": {"on": {"t2": "c"}}}}}}}},
             "idle": {"on": {
                 "enter": "work",
                 "inc": [{"guard": "small", "actions": "inc"}, {"actions": "note"}],
                 "dec": {"guard": state_in("#h.idle"), "actions": assign(
                     {"n": lambda c, e: c["n"] - 1})},
                 "note": {"actions": "note"},
                 "reset": {"actions": [assign({"n": 0}), raise_("note")]}}}}},
        guards={"small": lambda c, e: c["n"] < 3},
        actions={"inc": assign({"n": lambda c, e: c["n"] + 1}), "note": lambda c, e: None})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(EVENTS), max_size=40))
def test_shortcuts_change_nothing(events: list[str]) -> None:
    fast, slow = build(), build()
    slow.fast_paths = False
    a, _ = fast.initial_transition()
    b, _ = slow.initial_transition()
    for event in events:
        a, effects_a = fast.transition(a, event)
        b, effects_b = slow.transition(b, event)
        assert snapshot_to_json(a) == snapshot_to_json(b)
        assert [e.to_json() for e in effects_a] == [e.to_json() for e in effects_b]
