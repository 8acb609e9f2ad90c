"""Built-in actions (assign, raise_, emit, log, enqueue_actions) and how user actions are
called: ``fn(context, event, **params)`` with the context as it is at that point of the
action list."""

from __future__ import annotations

from typing import Any

import pytest

from statecharts import (
    assign,
    create_actor,
    create_machine,
    emit,
    enqueue_actions,
    log,
    raise_,
    setup,
)
from statecharts.effects import Emit, Log, RunAction

from .corekit import plain


def step(config: dict[str, Any], events: list[Any], **impl: Any) -> tuple[Any, list[Any]]:
    machine = create_machine(config, **impl)
    snapshot, effects = machine.initial_transition()
    collected = list(effects)
    for event in events:
        snapshot, effects = machine.transition(snapshot, event)
        collected.extend(effects)
    return snapshot, collected


def on_e(*actions: Any, context: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": "m",
        "initial": "a",
        "context": context or {"n": 1, "keep": "k"},
        "states": {"a": {"on": {"E": {"actions": list(actions)}}}},
    }


ASSIGN_FORMS = [
    (
        "mapping-of-values",
        assign({"n": 5, "s": "x"}),
        {"type": "E"},
        {"n": 5, "keep": "k", "s": "x"},
    ),
    (
        "mapping-of-functions",
        assign({"n": lambda c, e: c["n"] + e["by"]}),
        {"type": "E", "by": 3},
        {"n": 4, "keep": "k"},
    ),
    (
        "function-returning-partial-update",
        assign(lambda c, e: {"n": c["n"] * 10}),
        {"type": "E"},
        {"n": 10, "keep": "k"},
    ),
    (
        "sequential-assigns-see-each-other",
        [assign({"n": lambda c, e: c["n"] + 1}), assign({"m": lambda c, e: c["n"] * 2})],
        {"type": "E"},
        {"n": 2, "m": 4, "keep": "k"},
    ),
    (
        "nested-values-replace-whole-keys",
        assign({"keep": {"deep": [1, {"x": None}]}}),
        {"type": "E"},
        {"n": 1, "keep": {"deep": [1, {"x": None}]}},
    ),
]


@pytest.mark.parametrize(
    ("name", "action", "event", "context"), ASSIGN_FORMS, ids=[row[0] for row in ASSIGN_FORMS]
)
def test_assign_forms(name: str, action: Any, event: Any, context: dict[str, Any]) -> None:
    actions = action if isinstance(action, list) else [action]
    snapshot, _ = step(on_e(*actions), [event])
    assert plain(snapshot.context) == context


def test_named_assign_with_params_and_named_raise_from_actions_map() -> None:
    impl = {"inc": assign(lambda c, e, by: {"n": c["n"] + by}), "ping": raise_("PING")}
    config = {
        "id": "m",
        "initial": "a",
        "context": {"n": 0},
        "states": {
            "a": {
                "on": {
                    "E": {"actions": [{"type": "inc", "params": {"by": 2}}, "inc_one", "ping"]},
                    "PING": "b",
                }
            },
            "b": {},
        },
    }
    impl["inc_one"] = assign({"n": lambda c, e: c["n"] + 1})
    machine = setup(actions=impl).create_machine(config)
    snapshot, effects = machine.transition(machine.initial_transition()[0], "E")
    assert plain(snapshot.context) == {"n": 3}
    assert snapshot.value == "b"
    assert effects == ()


def test_user_actions_see_context_at_their_position_and_get_params() -> None:
    seen: list[tuple[Any, ...]] = []

    def record(context: Any, event: Any, **params: Any) -> None:
        seen.append((plain(context), plain(event), params))

    config = on_e("record", assign({"n": 2}), {"type": "record", "params": {"tag": "after"}})
    _, effects = step(config, [{"type": "E", "x": 1}], actions={"record": record})
    runs = [e for e in effects if isinstance(e, RunAction)]
    assert [(r.type, plain(r.params), plain(r.context)["n"]) for r in runs] == [
        ("record", {}, 1),
        ("record", {"tag": "after"}, 2),
    ]
    assert runs[0].event == {"type": "E", "x": 1}

    actor = create_actor(create_machine(config, actions={"record": record})).start()
    actor.send({"type": "E", "x": 1})
    assert seen == [
        ({"n": 1, "keep": "k"}, {"type": "E", "x": 1}, {}),
        ({"n": 2, "keep": "k"}, {"type": "E", "x": 1}, {"tag": "after"}),
    ]


def test_string_event_is_normalized_before_anything_sees_it() -> None:
    events: list[Any] = []
    config = {
        "id": "m",
        "initial": "a",
        "states": {
            "a": {
                "on": {
                    "E": {
                        "guard": lambda c, e: events.append(("guard", plain(e))) or True,
                        "actions": [lambda c, e: events.append(("action", plain(e)))],
                    }
                }
            }
        },
    }
    actor = create_actor(create_machine(config)).start()
    actor.send("E")
    assert events == [("guard", {"type": "E"}), ("action", {"type": "E"})]


def test_inline_callable_action_runs_in_the_actor_and_is_named_in_effects() -> None:
    calls: list[int] = []

    def bump(context: Any, event: Any) -> None:
        calls.append(context["n"])

    _, effects = step(on_e(bump), ["E"])
    assert [e.type for e in effects if isinstance(e, RunAction)] == ["bump"]
    actor = create_actor(create_machine(on_e(bump))).start()
    actor.send("E")
    actor.send("E")
    assert calls == [1, 1]


def test_emit_reaches_listeners_in_order_with_context_functions() -> None:
    config = on_e(
        emit({"type": "saved", "id": 7}),
        assign({"n": 9}),
        emit(lambda c, e: {"type": "count", "n": c["n"]}),
    )
    _, effects = step(config, ["E"])
    assert [plain(e.event) for e in effects if isinstance(e, Emit)] == [
        {"type": "saved", "id": 7},
        {"type": "count", "n": 9},
    ]

    heard: list[Any] = []
    actor = create_actor(create_machine(config)).start()
    actor.on("saved", lambda ev: heard.append(("saved", plain(ev))))
    actor.on("*", lambda ev: heard.append(("*", ev["type"])))
    actor.send("E")
    assert heard == [("saved", {"type": "saved", "id": 7}), ("*", "saved"), ("*", "count")]


def test_log_effects_carry_label_and_value() -> None:
    config = on_e(log("plain text"), log(lambda c, e: c["n"] + 1, label="next"), log())
    _, effects = step(config, [{"type": "E", "p": 1}])
    logs = [e for e in effects if isinstance(e, Log)]
    assert [(entry.label, plain(entry.value)) for entry in logs] == [
        (None, "plain text"),
        ("next", 2),
        (None, {"context": {"n": 1, "keep": "k"}, "event": {"type": "E", "p": 1}}),
    ]


def test_enqueue_actions_decides_at_run_time_with_check() -> None:
    def decide(context: Any, event: Any, enqueue: Any, check: Any) -> None:
        enqueue(assign({"n": context["n"] + 1}))
        if check("is_big"):
            enqueue({"type": "note", "params": {"big": True}})
        else:
            enqueue("note")
        if check({"type": "over", "params": {"limit": 0}}):
            enqueue(raise_("DONE"))

    config = {
        "id": "m",
        "initial": "a",
        "context": {"n": 1},
        "states": {
            "a": {"on": {"E": {"actions": [enqueue_actions(decide), "note"]}, "DONE": "b"}},
            "b": {},
        },
    }
    impl: dict[str, Any] = {
        "guards": {"is_big": lambda c, e: c["n"] > 5, "over": lambda c, e, limit: c["n"] > limit},
        "actions": {"note": lambda c, e, **p: None},
    }
    snapshot, effects = step(config, ["E"], **impl)
    runs = [
        (e.type, plain(e.params), plain(e.context)) for e in effects if isinstance(e, RunAction)
    ]
    assert runs == [("note", {}, {"n": 2}), ("note", {}, {"n": 2})]
    assert snapshot.value == "b"
    big = {**config, "context": {"n": 10}}
    _, effects = step(big, ["E"], **impl)
    assert [plain(e.params) for e in effects if isinstance(e, RunAction)] == [{"big": True}, {}]


def test_transition_actions_see_the_exit_actions_assigns() -> None:
    config = {
        "id": "m",
        "initial": "a",
        "context": {"trail": []},
        "states": {
            "a": {
                "exit": assign({"trail": lambda c, e: [*c["trail"], "exit a"]}),
                "on": {
                    "E": {
                        "target": "b",
                        "actions": assign({"trail": lambda c, e: [*c["trail"], "transition"]}),
                    }
                },
            },
            "b": {"entry": assign({"trail": lambda c, e: [*c["trail"], "enter b"]})},
        },
    }
    snapshot, _ = step(config, ["E"])
    assert plain(snapshot.context) == {"trail": ["exit a", "transition", "enter b"]}
