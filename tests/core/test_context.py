"""Context is immutable (nested values too) and stays JSON: a non-JSON value raises at
``assign`` time, naming the key."""

from __future__ import annotations

import datetime
import pickle
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from statecharts import ContextError, assign, create_actor, create_machine, thaw

from .corekit import plain

CONFIG = {
    "id": "m",
    "initial": "a",
    "context": {"user": {"name": "ada", "roles": ["admin"]}, "items": [1, {"k": "v"}], "n": 0},
    "states": {"a": {"on": {"E": {"actions": ["spy"]}}}},
}

MUTATIONS: list[tuple[str, Callable[[Any], Any]]] = [
    ("set-top-level", lambda c: c.__setitem__("n", 1)),
    ("delete-top-level", lambda c: c.__delitem__("n")),
    ("update", lambda c: c.update(n=2)),
    ("pop", lambda c: c.pop("n")),
    ("setdefault", lambda c: c.setdefault("z", 1)),
    ("clear", lambda c: c.clear()),
    ("in-place-or", lambda c: c.__ior__({"n": 3})),
    ("set-nested-dict", lambda c: c["user"].__setitem__("name", "bob")),
    ("append-nested-list", lambda c: c["user"]["roles"].append("root")),
    ("set-list-item", lambda c: c["items"].__setitem__(0, 9)),
    ("extend-list", lambda c: c["items"].extend([2])),
    ("sort-list", lambda c: c["items"].sort()),
    ("set-dict-in-list", lambda c: c["items"][1].__setitem__("k", "w")),
    ("in-place-add-list", lambda c: c["items"].__iadd__([5])),
]


@pytest.mark.parametrize(("name", "mutate"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_snapshot_context_is_deeply_immutable(name: str, mutate: Callable[[Any], Any]) -> None:
    snapshot, _ = create_machine(CONFIG, actions={"spy": lambda c, e: None}).initial_transition()
    with pytest.raises(TypeError):
        mutate(snapshot.context)
    assert plain(snapshot.context) == CONFIG["context"]


@pytest.mark.parametrize(("name", "mutate"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_actions_cannot_mutate_the_context_they_are_given(
    name: str, mutate: Callable[[Any], Any]
) -> None:
    outcomes: list[str] = []

    def spy(context: Any, event: Any) -> None:
        try:
            mutate(context)
        except TypeError:
            outcomes.append("refused")

    actor = create_actor(create_machine(CONFIG, actions={"spy": spy})).start()
    actor.send("E")
    assert outcomes == ["refused"]
    assert plain(actor.get_snapshot().context) == CONFIG["context"]


def test_events_are_frozen_too() -> None:
    outcomes: list[str] = []

    def spy(context: Any, event: Any) -> None:
        for mutate in (
            lambda: event.__setitem__("type", "X"),
            lambda: event["user"].__setitem__("name", "eve"),
            lambda: event["user"]["roles"].append("root"),
        ):
            try:
                mutate()
            except TypeError:
                outcomes.append("refused")

    actor = create_actor(create_machine(CONFIG, actions={"spy": spy})).start()
    actor.send({"type": "E", "user": {"name": "ada", "roles": []}})
    assert outcomes == ["refused"] * 3


def test_values_assigned_are_copied_not_shared() -> None:
    mine = {"list": [1, 2]}
    machine = create_machine(
        {
            "id": "m",
            "initial": "a",
            "context": {},
            "states": {"a": {"on": {"E": {"actions": assign({"data": lambda c, e: mine})}}}},
        }
    )
    snapshot, _ = machine.transition(machine.initial_transition()[0], "E")
    mine["list"].append(3)
    assert plain(snapshot.context) == {"data": {"list": [1, 2]}}
    copy = thaw(snapshot.context)
    copy["data"]["list"].append(4)  # thaw gives a plain, mutable copy
    assert plain(snapshot.context) == {"data": {"list": [1, 2]}}


class Opaque:
    """Some object that is not JSON."""


NOT_JSON: list[tuple[str, Any, str]] = [
    ("datetime", {"when": lambda c, e: datetime.datetime(2024, 1, 1)}, "when"),
    ("set", {"tags": lambda c, e: {"a"}}, "tags"),
    ("object", {"obj": lambda c, e: Opaque()}, "obj"),
    ("decimal", {"price": lambda c, e: Decimal("1.5")}, "price"),
    ("nan", {"ratio": lambda c, e: float("nan")}, "ratio"),
    ("nested-set", {"user": lambda c, e: {"tags": {"a"}}}, "user.tags"),
    (
        "set-in-list",
        {"items": lambda c, e: [1, {"when": datetime.date(2024, 1, 1)}]},
        "items[1].when",
    ),
    ("non-string-key", {"counts": lambda c, e: {1: "one"}}, "counts.1"),
    ("bytes", {"raw": lambda c, e: b"\x00"}, "raw"),
]


@pytest.mark.parametrize(("name", "assignment", "path"), NOT_JSON, ids=[r[0] for r in NOT_JSON])
def test_non_json_assign_raises_naming_the_key(
    name: str, assignment: dict[str, Any], path: str
) -> None:
    machine = create_machine(
        {
            "id": "m",
            "initial": "a",
            "context": {"ok": 1},
            "states": {"a": {"on": {"E": {"target": "b", "actions": assign(assignment)}}}, "b": {}},
        }
    )
    snapshot, _ = machine.initial_transition()
    with pytest.raises(ContextError) as info:
        machine.transition(snapshot, "E")
    assert info.value.path == path
    assert f"'{path}'" in str(info.value)
    assert snapshot.value == "a" and plain(snapshot.context) == {"ok": 1}


def test_non_json_assign_through_a_function_update_names_the_key() -> None:
    machine = create_machine(
        {
            "id": "m",
            "initial": "a",
            "context": {},
            "states": {
                "a": {"on": {"E": {"actions": assign(lambda c, e: {"at": datetime.time(1, 2)})}}}
            },
        }
    )
    with pytest.raises(ContextError) as info:
        machine.transition(machine.initial_transition()[0], "E")
    assert info.value.path == "at"


def test_context_factory_gets_the_input() -> None:
    machine = create_machine(
        {
            "id": "m",
            "initial": "a",
            "context": lambda input: {"owner": input["owner"], "n": 0},
            "states": {"a": {}},
        }
    )
    snapshot, _ = machine.initial_transition(input={"owner": "ada"})
    assert plain(snapshot.context) == {"owner": "ada", "n": 0}
    with pytest.raises(TypeError):
        snapshot.context["n"] = 1  # type: ignore[index]


def test_contexts_with_equal_contents_hash_equal_and_never_pickle() -> None:
    machine = create_machine(
        {
            "id": "m",
            "initial": "a",
            "context": {"n": 0, "tags": ["x"]},
            "states": {
                "a": {
                    "on": {
                        "INC": {"actions": assign({"n": lambda c, e: c["n"] + 1})},
                        "DEC": {"actions": assign({"n": lambda c, e: c["n"] - 1})},
                    }
                }
            },
        }
    )
    start, _ = machine.initial_transition()
    there, _ = machine.transition(start, "INC")
    back, _ = machine.transition(there, "DEC")
    assert back.context is not start.context and back.context == start.context
    assert hash(back.context) == hash(start.context) != hash(there.context)
    assert len({start.context, back.context, there.context}) == 2
    with pytest.raises(AttributeError):  # no slot left to write, not even a cached hash
        back.context._hash = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="never pickled"):
        pickle.dumps(start.context)
