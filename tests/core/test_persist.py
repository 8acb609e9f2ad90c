"""Persist and restore: exact round trips, validation that names the field, migrations, and
resuming without replaying entry actions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from statecharts import (
    SimulatedClock,
    SnapshotError,
    SnapshotVersionError,
    assign,
    create_actor,
    create_machine,
    snapshot_to_json,
)

from .corekit import build, plain

CONFIG: dict[str, Any] = {
    "id": "doc",
    "initial": "editing",
    "context": {"edits": 0, "tags": ["draft"]},
    "states": {
        "editing": {
            "type": "parallel",
            "on": {"PUBLISH": "published"},
            "states": {
                "text": {
                    "initial": "clean",
                    "states": {
                        "clean": {
                            "on": {
                                "TYPE": {
                                    "target": "dirty",
                                    "actions": assign({"edits": lambda c, e: c["edits"] + 1}),
                                }
                            }
                        },
                        "dirty": {"on": {"SAVE": "clean"}},
                    },
                },
                "mode": {
                    "initial": "normal",
                    "states": {
                        "normal": {"on": {"ZEN": "zen"}},
                        "zen": {"on": {"ZEN": "normal"}},
                        "h": {"type": "history", "history": "deep"},
                    },
                },
            },
        },
        "published": {"on": {"EDIT": "editing.mode.h"}, "after": {"5000": "archived"}},
        "archived": {"type": "final", "output": {"archived": True}},
    },
    "output": lambda c, e: {"edits": c["edits"], **e["output"]},
}


def machine(config: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    return build(config or CONFIG, **kwargs)


def walk(events: list[str], config: dict[str, Any] | None = None) -> tuple[Any, Any]:
    m = machine(config)
    snapshot, _ = m.initial_transition(now=1_000)
    for event in events:
        snapshot, _ = m.transition(snapshot, event, now=2_000)
    return m, snapshot


def test_persisted_form_is_json_with_every_field() -> None:
    m, snapshot = walk(["TYPE", "ZEN", "PUBLISH"])
    data = m.persist(snapshot)
    assert orjson.loads(orjson.dumps(data)) == data
    assert data["format"] == 1
    assert data["machine"] == "doc"
    assert data["version"] is None
    assert data["fingerprint"] == m.fingerprint
    assert data["value"] == "published"
    assert data["context"] == {"edits": 1, "tags": ["draft"]}
    assert data["status"] == "active"
    assert data["history"] == {"doc.editing.mode.h": ["doc.editing.mode.zen"]}
    assert data["timers"] == [
        {
            "id": "xstate.after.5000.doc.published",
            "event": {"type": "xstate.after.5000.doc.published"},
            "due_at": 7_000,
            "target": None,
        }
    ]
    assert snapshot_to_json(snapshot) == orjson.dumps(data)


@pytest.mark.parametrize(
    "events",
    [[], ["TYPE"], ["TYPE", "ZEN"], ["TYPE", "ZEN", "PUBLISH"], ["ZEN", "PUBLISH", "EDIT"]],
)
def test_round_trip_through_bytes_is_exact(events: list[str]) -> None:
    m, snapshot = walk(events)
    restored = machine().restore(snapshot_to_json(snapshot))
    assert m.persist(restored) == m.persist(snapshot)
    assert restored.value == snapshot.value
    assert restored.tags == snapshot.tags


def test_history_survives_the_round_trip() -> None:
    m, snapshot = walk(["ZEN", "PUBLISH"])
    restored = m.restore(snapshot_to_json(snapshot))
    after, _ = m.transition(restored, "EDIT")
    assert plain(after.value) == {"editing": {"text": "clean", "mode": "zen"}}


def test_done_snapshot_round_trip_keeps_output() -> None:
    m, snapshot = walk(["TYPE", "PUBLISH"])
    (timer,) = snapshot.timers
    done, _ = m.fire_timer(snapshot, timer.id, now=timer.due_at)
    assert done.status == "done"
    restored = m.restore(snapshot_to_json(done))
    assert restored.status == "done"
    assert restored.output == {"edits": 1, "archived": True}


def test_foreign_machine_names_machine_field_and_both_ids() -> None:
    _, snapshot = walk([])
    other = create_machine({**CONFIG, "id": "invoice"}, actions={})
    with pytest.raises(SnapshotError) as info:
        other.restore(snapshot_to_json(snapshot))
    assert info.value.field == "machine"
    assert "'doc'" in str(info.value) and "'invoice'" in str(info.value)
    with pytest.raises(SnapshotError) as info:
        other.transition(snapshot, "TYPE")
    assert info.value.field == "machine"


def test_changed_definition_raises_version_error_naming_fingerprint() -> None:
    _, snapshot = walk(["TYPE"])
    changed = {**CONFIG, "states": {**CONFIG["states"], "extra": {}}}
    with pytest.raises(SnapshotVersionError) as info:
        machine(changed).restore(snapshot_to_json(snapshot))
    assert info.value.field == "fingerprint"
    assert "fingerprint" in str(info.value)


def test_description_and_meta_do_not_change_the_fingerprint() -> None:
    _, snapshot = walk(["TYPE"])
    described = {
        **CONFIG,
        "description": "a document",
        "states": {
            **CONFIG["states"],
            "archived": {**CONFIG["states"]["archived"], "meta": {"x": 1}},
        },
    }
    restored = machine(described).restore(snapshot_to_json(snapshot))
    assert restored.matches("editing.text.dirty")


def rename_edits(data: dict[str, Any]) -> dict[str, Any]:
    context = dict(data["context"])
    context["changes"] = context.pop("edits")
    return {**data, "context": context}


V2 = {
    **CONFIG,
    "context": {"changes": 0, "tags": []},
    "output": lambda c, e: {"changes": c["changes"]},
    "states": {
        **CONFIG["states"],
        "editing": {**CONFIG["states"]["editing"], "on": {"PUBLISH": "published", "DROP": "gone"}},
        "gone": {"type": "final"},
    },
}


def test_migration_from_an_older_version() -> None:
    v1 = machine(version="1")
    snapshot, _ = v1.initial_transition()
    snapshot, _ = v1.transition(snapshot, "TYPE")
    v2 = machine(V2, version="2", migrations={"1": rename_edits})
    restored = v2.restore(snapshot_to_json(snapshot))
    assert plain(restored.context) == {"changes": 1, "tags": ["draft"]}
    assert restored.matches("editing.text.dirty")
    moved, _ = v2.transition(restored, "DROP")
    assert moved.status == "done"
    assert v2.persist(restored)["version"] == "2"


def test_older_version_without_migration_names_version() -> None:
    v1 = machine(version="1")
    snapshot, _ = v1.initial_transition()
    with pytest.raises(SnapshotVersionError) as info:
        machine(V2, version="3", migrations={"2": rename_edits}).restore(snapshot_to_json(snapshot))
    assert info.value.field == "version"
    assert "'1'" in str(info.value) and "'3'" in str(info.value)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        target = data
        keys = path.split("/")
        for key in keys[:-1]:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if isinstance(target, list):
            target[int(keys[-1])] = value
        else:
            target[keys[-1]] = value

    return change


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda data: data.pop(key)


CORRUPT: list[tuple[str, Callable[[dict[str, Any]], None], type[Exception], str]] = [
    ("missing-value", _drop("value"), SnapshotError, "value"),
    ("unknown-state", _set("value", "nowhere"), SnapshotError, "value"),
    ("state-value-wrong-shape", _set("value", 42), SnapshotError, "value"),
    ("missing-status", _drop("status"), SnapshotError, "status"),
    ("bad-status", _set("status", "zombie"), SnapshotError, "status"),
    ("context-not-mapping", _set("context", [1, 2]), SnapshotError, "context"),
    ("history-unknown-state", _set("history", {"doc.nope": []}), SnapshotError, "history.doc.nope"),
    (
        "history-remembers-unknown",
        _set("history", {"doc.editing.mode.h": ["doc.gone"]}),
        SnapshotError,
        "history.doc.editing.mode.h[0]",
    ),
    ("timers-not-list", _set("timers", {}), SnapshotError, "timers"),
    ("context-empty-list", _set("context", []), SnapshotError, "context"),
    ("history-empty-list", _set("history", []), SnapshotError, "history"),
    ("children-empty-list", _set("children", []), SnapshotError, "children"),
    ("timer-due-not-int", _set("timers/0/due_at", "soon"), SnapshotError, "timers[0].due_at"),
    ("timer-event-without-type", _set("timers/0/event", {}), SnapshotError, "timers[0].event"),
    ("bad-format", _set("format", 99), SnapshotVersionError, "format"),
    ("other-machine", _set("machine", "invoice"), SnapshotError, "machine"),
    ("fingerprint-tampered", _set("fingerprint", "0" * 32), SnapshotVersionError, "fingerprint"),
]


@pytest.mark.parametrize(
    ("name", "corrupt", "error", "field"), CORRUPT, ids=[row[0] for row in CORRUPT]
)
def test_corrupt_data_names_the_field(
    name: str, corrupt: Callable[[dict[str, Any]], None], error: type[Exception], field: str
) -> None:
    m, snapshot = walk(["ZEN", "PUBLISH"])
    data = orjson.loads(snapshot_to_json(snapshot))
    corrupt(data)
    with pytest.raises(error) as info:
        m.restore(orjson.dumps(data))
    assert getattr(info.value, "field", None) == field


@pytest.mark.parametrize(("raw", "field"), [(b"{not json", "<json>"), (b"[1, 2]", "<root>")])
def test_bytes_that_are_not_a_snapshot(raw: bytes, field: str) -> None:
    with pytest.raises(SnapshotError) as info:
        machine().restore(raw)
    assert info.value.field == field


def test_restoring_runs_no_entry_action_and_arms_only_pending_timers() -> None:
    config = {
        "id": "m",
        "initial": "a",
        "context": {"n": 0},
        "states": {
            "a": {"entry": ["hello"], "on": {"E": "b"}},
            "b": {"entry": [assign({"n": lambda c, e: c["n"] + 1})], "after": {"100": "c"}},
            "c": {"entry": ["arrived"]},
        },
    }
    first: list[str] = []
    clock = SimulatedClock()
    actor = create_actor(build(config, sink=first), clock=clock).start()
    actor.send("E")
    saved = snapshot_to_json(actor.get_snapshot())
    actor.stop()
    assert first == ["+(root)", "+a", "hello", "-a", "+b"]

    second: list[str] = []
    clock2 = SimulatedClock()
    resumed = create_actor(build(config, sink=second), snapshot=saved, clock=clock2).start()
    assert second == []
    assert plain(resumed.get_snapshot().context) == {"n": 1}
    assert clock2.pending() == 1
    clock2.advance(100)
    assert resumed.get_snapshot().value == "c"
    assert second == ["-b", "+c", "arrived"]
