"""to_scxml: export a machine with named guards and actions, load it back, same behaviour."""

from __future__ import annotations

from typing import Any

import pytest

from statecharts import and_, assign, create_machine, log, not_, raise_, state_in
from statecharts.actor import Actor, create_actor
from statecharts.clock import SimulatedClock
from statecharts.io.scxml import load_scxml, to_scxml

CONFIG: dict[str, Any] = {
    "id": "door",
    "initial": "closed",
    "context": {"opened": 0, "limit": 3},
    "states": {
        "closed": {
            "entry": [{"type": "record", "params": {"what": "closed"}}],
            "on": {
                "OPEN": [
                    {"target": "open", "guard": and_("underLimit", not_("jammed"))},
                    {"target": "locked.hist"},
                ],
                "alarm.*": {"target": "alarm"},
            },
        },
        "open": {
            "entry": ["record", raise_("OPENED")],
            "exit": [log("leaving open", "door")],
            "on": {
                "OPENED": {"actions": [{"type": "record", "params": {"what": "opened"}}]},
                "CLOSE": "closed",
                "LOCK": "locked",
            },
        },
        "locked": {
            "initial": "bolted",
            "states": {
                "bolted": {"on": {"TURN": "chained"}},
                "chained": {"on": {"TURN": {"target": "done"}}},
                "done": {"type": "final"},
                "hist": {"type": "history", "history": "shallow"},
            },
            "onDone": {"target": "closed", "actions": "record"},
            "on": {"UNLOCK": {"target": "closed", "guard": state_in("#door.locked.chained")}},
        },
        "alarm": {
            "type": "parallel",
            "entry": [assign({"limit": 0})],
            "states": {
                "siren": {"initial": "on", "states": {"on": {"on": {"HUSH": "off"}}, "off": {}}},
                "light": {"initial": "blink", "states": {"blink": {}}},
            },
            "on": {"RESET": "closed"},
        },
    },
}


def _implementations(calls: list[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    def record(context: Any, event: Any, **params: Any) -> None:
        calls.append((event["type"], params, context["opened"]))

    def under_limit(context: Any, event: Any) -> bool:
        return bool(context["opened"] < context["limit"])

    def jammed(context: Any, event: Any) -> bool:
        return event.get("jam") is True

    guards = {"underLimit": under_limit, "jammed": jammed}
    return guards, {"record": record}


def _actor(machine: Any) -> Actor:
    return create_actor(machine, clock=SimulatedClock()).start()


def _user_context(actor: Actor) -> dict[str, Any]:
    return {k: v for k, v in actor.get_snapshot().context.items() if k != "__scxml__"}


EVENTS: list[Any] = [
    "OPEN",
    "OPENED",
    "CLOSE",
    {"type": "OPEN", "jam": True},
    "TURN",
    "UNLOCK",
    "TURN",
    "UNLOCK",
    "TURN",
    "OPEN",
    "LOCK",
    "TURN",
    "TURN",
    "alarm.fire",
    "HUSH",
    "RESET",
    "alarmist",
    "OPEN",
]


def test_export_load_same_behaviour() -> None:
    original_calls: list[Any] = []
    guards, actions = _implementations(original_calls)
    original = create_machine(CONFIG, guards=guards, actions=actions)
    text = to_scxml(original)
    loaded_calls: list[Any] = []
    guards2, actions2 = _implementations(loaded_calls)
    loaded = load_scxml(text, guards=guards2, actions=actions2)

    a, b = _actor(original), _actor(loaded)
    assert a.get_snapshot().value == b.get_snapshot().value
    for event in EVENTS:
        a.send(event)
        b.send(event)
        assert b.get_snapshot().value == a.get_snapshot().value, event
        assert _user_context(b) == dict(a.get_snapshot().context), event
    assert loaded_calls == original_calls
    assert len(original_calls) >= 4  # the walk went through the actions, not around them
    assert a.get_snapshot().context["limit"] == 0  # ... and through the assign
    # the last OPEN was refused by the guard: history led back to the final 'done', whose
    # onDone recorded and closed the door again
    assert original_calls[-2][0] == "xstate.done.state.door.locked"
    assert a.get_snapshot().value == "closed"


def test_the_export_is_readable_scxml() -> None:
    guards, actions = _implementations([])
    text = to_scxml(create_machine(CONFIG, guards=guards, actions=actions))
    assert (
        '<transition event="OPEN" cond="(underLimit()) and (not (jammed()))" '
        'target="door.open" type="internal"/>' in text
    )
    assert '<sc:action type="record">' in text
    assert '<history id="door.locked.hist" type="shallow">' in text


def test_inline_functions_cannot_be_exported() -> None:
    machine = create_machine(
        {
            "id": "m",
            "initial": "a",
            "states": {"a": {"on": {"GO": {"target": "b", "guard": lambda c, e: True}}}, "b": {}},
        }
    )
    with pytest.raises(ValueError, match=r"state 'm\.a': the inline guard"):
        to_scxml(machine)
    timed = create_machine(
        {"id": "m", "initial": "a", "states": {"a": {"after": {"1000": "b"}}, "b": {}}}
    )
    with pytest.raises(ValueError, match=r"state 'm\.a': 'after'"):
        to_scxml(timed)
