"""``onSnapshot`` on an invoke and ``spawn_child(..., sync_snapshot=True)``: the parent hears
``xstate.snapshot.<id>`` each time a child machine's snapshot changes (XState v5; issue 25)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statecharts import (
    MachineDefinitionError,
    SimulatedClock,
    assign,
    create_actor,
    create_machine,
    send_to,
    spawn_child,
)

COUNTER = create_machine(
    {
        "id": "counter",
        "initial": "counting",
        "context": {"n": 0},
        "states": {
            "counting": {
                "on": {
                    "INC": {"actions": assign({"n": lambda c, e: c["n"] + 1})},
                    "STOP": "stopped",
                }
            },
            "stopped": {"type": "final"},
        },
    }
)
SEEN = {
    "actions": assign(
        {
            "seen": lambda c, e: [
                *c["seen"],
                [e["snapshot"]["value"], e["snapshot"]["context"]["n"], e["snapshot"]["status"]],
            ]
        }
    )
}


def test_on_snapshot_hears_every_snapshot_of_the_invoked_machine() -> None:
    machine = create_machine(
        {
            "initial": "watching",
            "context": {"seen": []},
            "states": {
                "watching": {
                    "invoke": {"id": "c", "src": "counter", "onSnapshot": SEEN, "onDone": "over"},
                    "on": {
                        "INC": {"actions": send_to("c", "INC")},
                        "STOP": {"actions": send_to("c", "STOP")},
                    },
                },
                "over": {},
            },
        },
        actors={"counter": COUNTER},
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    actor.send("INC")
    actor.send("INC")
    actor.send("STOP")
    snapshot = actor.get_snapshot()
    assert snapshot.value == "over"
    assert snapshot.context["seen"] == [
        ["counting", 0, "active"],
        ["counting", 1, "active"],
        ["counting", 2, "active"],
        ["stopped", 2, "done"],
    ]


def test_on_snapshot_with_a_target_moves_the_parent() -> None:
    machine = create_machine(
        {
            "initial": "a",
            "states": {
                "a": {
                    "invoke": {
                        "id": "c",
                        "src": "counter",
                        "onSnapshot": {
                            "target": "b",
                            "guard": lambda c, e: e["snapshot"]["context"]["n"] >= 1,
                        },
                    },
                    "on": {"INC": {"actions": send_to("c", "INC")}},
                },
                "b": {},
            },
        },
        actors={"counter": COUNTER},
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    assert actor.get_snapshot().value == "a"
    actor.send("INC")
    assert actor.get_snapshot().value == "b"


def test_without_on_snapshot_the_parent_hears_nothing() -> None:
    events: list[Any] = []
    machine = create_machine(
        {
            "initial": "a",
            "states": {
                "a": {
                    "invoke": {"id": "c", "src": "counter"},
                    "on": {"INC": {"actions": send_to("c", "INC")}},
                }
            },
        },
        actors={"counter": COUNTER},
    )
    actor = create_actor(
        machine, clock=SimulatedClock(), inspect=lambda r: events.append(r.event)
    ).start()
    actor.send("INC")
    assert not [e for e in events if e and e["type"].startswith("xstate.snapshot.")]


def test_spawned_child_with_sync_snapshot_reports_its_snapshots() -> None:
    machine = create_machine(
        {
            "initial": "a",
            "context": {"seen": []},
            "states": {
                "a": {
                    "entry": spawn_child("counter", id="c", sync_snapshot=True),
                    "on": {"xstate.snapshot.c": SEEN, "INC": {"actions": send_to("c", "INC")}},
                }
            },
        },
        actors={"counter": COUNTER},
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    actor.send("INC")
    assert actor.get_snapshot().context["seen"] == [
        ["counting", 0, "active"],
        ["counting", 1, "active"],
    ]


def test_spawned_child_without_sync_snapshot_reports_nothing() -> None:
    machine = create_machine(
        {
            "initial": "a",
            "context": {"seen": []},
            "states": {
                "a": {
                    "entry": spawn_child("counter", id="c"),
                    "on": {"xstate.snapshot.c": SEEN, "INC": {"actions": send_to("c", "INC")}},
                }
            },
        },
        actors={"counter": COUNTER},
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    actor.send("INC")
    assert actor.get_snapshot().context["seen"] == []


def test_sync_snapshot_survives_a_restore() -> None:
    machine = create_machine(
        {
            "initial": "a",
            "context": {"seen": []},
            "states": {
                "a": {
                    "entry": spawn_child("counter", id="c", sync_snapshot=True),
                    "on": {"xstate.snapshot.c": SEEN, "INC": {"actions": send_to("c", "INC")}},
                }
            },
        },
        actors={"counter": COUNTER},
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    resumed = create_actor(
        machine, clock=SimulatedClock(), snapshot=actor.get_persisted_snapshot()
    ).start()
    resumed.send("INC")
    assert resumed.get_snapshot().context["seen"] == [
        ["counting", 0, "active"],
        ["counting", 1, "active"],
    ]


def test_on_snapshot_is_validated_like_any_transition() -> None:
    with pytest.raises(MachineDefinitionError, match=r"states\.a\.invoke\.onSnapshot\[0\]"):
        create_machine(
            {
                "initial": "a",
                "states": {"a": {"invoke": {"id": "c", "src": "counter", "onSnapshot": "nowhere"}}},
            },
            actors={"counter": COUNTER},
        )


def test_the_documented_departures_from_xstate_on_child_snapshots() -> None:
    """Issue 44: where XState 5.33.3 acts otherwise, docs/semantics.md says so (items 6-8):
    no snapshot event for an event the child ignores, the child's done snapshot heard before
    xstate.done.actor, and no children listed once the machine has reached its final state."""
    heard: list[tuple[str, str, int]] = []
    machine = create_machine(
        {
            "initial": "watching",
            "states": {
                "watching": {
                    "invoke": {
                        "id": "c",
                        "src": "counter",
                        "onDone": "over",
                        "onSnapshot": {
                            "actions": lambda c, e: heard.append(
                                (e["type"], e["snapshot"]["status"], e["snapshot"]["context"]["n"])
                            )
                        },
                    },
                    "on": {
                        "PING": {"actions": send_to("c", "PING")},
                        "INC": {"actions": send_to("c", "INC")},
                        "STOP": {"actions": send_to("c", "STOP")},
                    },
                },
                "over": {"type": "final"},
            },
        },
        actors={"counter": COUNTER},
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    actor.send("PING")  # the counter takes no PING: nothing changes, nothing is heard (6)
    assert heard == [("xstate.snapshot.c", "active", 0)]
    actor.send("INC")
    actor.send("STOP")  # the done snapshot is heard, then xstate.done.actor.c ends it (7)
    assert heard[1:] == [("xstate.snapshot.c", "active", 1), ("xstate.snapshot.c", "done", 1)]
    assert actor.get_snapshot().status == "done"
    rooted = create_machine(
        {
            "id": "root",
            "invoke": {"id": "c", "src": "counter"},
            "initial": "a",
            "states": {"a": {"on": {"END": "b"}}, "b": {"type": "final"}},
        },
        actors={"counter": COUNTER},
    )
    root = create_actor(rooted, clock=SimulatedClock()).start()
    assert list(root.get_snapshot().children) == ["c"]
    root.send("END")  # XState's done snapshot still lists "c", stopped (8)
    assert (root.get_snapshot().status, dict(root.get_snapshot().children)) == ("done", {})
    semantics = (Path(__file__).resolve().parents[2] / "docs" / "semantics.md").read_text()
    for words in (
        "`onSnapshot` hears changes, not every event",
        "The child's `done` snapshot is heard too",
        "A machine that reached its top-level final state lists no children",
    ):
        assert words in semantics
