"""Transition plans must be invisible: the same events give the same snapshots (through JSON
bytes) and the same effects with the plans kept and reused (the default), with every plan
computed afresh by the reference algorithm (``machine.plans = False``), and after a
persist/restore between every two events.

``STATECHARTS_PLAN_EXAMPLES`` raises the number of event sequences per chart (default 100),
e.g. ``STATECHARTS_PLAN_EXAMPLES=5000 pytest tests/engine`` for a longer, opt-in run.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.charts import CONFIGS, EVENTS, implementations
from statecharts import (
    assign,
    create_actor,
    create_machine,
    enqueue_actions,
    raise_,
    snapshot_to_json,
    state_in,
)
from statecharts.clock import SimulatedClock
from statecharts.machine import Machine
from statecharts.routes import full_step

EXAMPLES = int(os.environ.get("STATECHARTS_PLAN_EXAMPLES", "100"))
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _note_if_small(context: Any, event: Any, enqueue: Any, check: Any) -> None:
    if check(state_in("#h.idle")):  # looks at the active states while it runs
        enqueue("note")


HIER: dict[str, Any] = {
    "id": "h",
    "initial": "work",
    "context": {"n": 0},
    "states": {
        "work": {
            "initial": "p",
            "entry": "note",
            "exit": "note",
            "on": {"leave": "idle", "inc": {"guard": "small", "actions": "inc"}},
            "states": {
                "p": {
                    "type": "parallel",
                    "states": {
                        "r1": {
                            "initial": "a",
                            "states": {
                                "a": {"on": {"t1": "b"}},
                                "b": {"on": {"t1": "a", "t2": "#h.idle"}},
                            },
                        },
                        "r2": {
                            "initial": "c",
                            "states": {
                                "c": {"on": {"t2": "d"}},
                                "d": {"on": {"t2": "c"}},
                                "hist": {"type": "history"},
                            },
                        },
                    },
                }
            },
        },
        "idle": {
            "entry": enqueue_actions(_note_if_small),
            "on": {
                "enter": "work",
                "back": "work.p.r2.hist",
                "inc": [{"guard": "small", "actions": "inc"}, {"actions": "note"}],
                "dec": {
                    "guard": state_in("#h.idle"),
                    "actions": assign({"n": lambda c, e: c["n"] - 1}),
                },
                "note": {"actions": "note"},
                "reset": {"actions": [assign({"n": 0}), raise_("note")]},
                "finish": "end",
            },
        },
        "end": {"type": "final"},
    },
}
HIER_EVENTS = [
    "t1",
    "t2",
    "leave",
    "enter",
    "back",
    "inc",
    "dec",
    "note",
    "nothing",
    "reset",
    "finish",
]

# a history state as a compound's initial state: entering the compound reads the history
# although no transition targets the history state
HISTORY_INITIAL: dict[str, Any] = {
    "id": "m",
    "initial": "p",
    "states": {
        "p": {
            "initial": "h",
            "on": {"OUT": "out"},
            "states": {
                "h": {"type": "history", "target": "b"},
                "a": {"on": {"NEXT": "b"}},
                "b": {"on": {"NEXT": "a"}},
            },
        },
        "out": {"on": {"BACK": "p"}},
    },
}


# the forms a composed route takes (algorithm.compose_route): an unguarded transition whose
# plan is the route, guarded choices, a targetless assign of several keys with values that must
# be frozen (strings, None, lists, floats), user actions around a change of state, and eventless
# guards after it where none may pass (the machine rests in the transient state)
COMPOSED: dict[str, Any] = {
    "id": "c",
    "initial": "idle",
    "context": {"n": 0, "tag": None, "items": [], "half": 0},
    "states": {
        "idle": {
            "on": {
                "GO": {
                    "target": "check",
                    "actions": [
                        "note",
                        assign(
                            {
                                "n": lambda c, e: c["n"] + 1,
                                "tag": lambda c, e: e.get("tag"),
                                "items": lambda c, e: [*c["items"][-2:], {"n": c["n"]}],
                            }
                        ),
                    ],
                },
                "NAME": [
                    {
                        "guard": "small",
                        "actions": assign(
                            {
                                "tag": lambda c, e: "x" * (c["n"] % 3),
                                "half": lambda c, e: c["n"] / 2,
                            }
                        ),
                    },
                    {"actions": "note"},
                ],
            }
        },
        "check": {
            "entry": "note",
            "exit": "note",
            "always": [{"guard": "even", "target": "even"}, {"guard": "small", "target": "idle"}],
            "on": {"BACK": "idle", "NAME": {"actions": assign({"tag": None})}},
        },
        "even": {"entry": "note", "on": {"GO": "idle"}},
    },
}


def build(name: str, plans: bool) -> Machine:
    if name == "composed":
        machine = create_machine(
            COMPOSED,
            guards={"small": lambda c, e: c["n"] < 4, "even": lambda c, e: c["n"] % 2 == 0},
            actions={"note": lambda c, e: None},
        )
    elif name == "hier":
        machine = create_machine(
            HIER,
            guards={"small": lambda c, e: c["n"] < 3},
            actions={"inc": assign({"n": lambda c, e: c["n"] + 1}), "note": lambda c, e: None},
        )
    elif name == "history as initial":
        machine = create_machine(HISTORY_INITIAL)
    else:
        machine = create_machine(CONFIGS[name], **implementations())
    machine.plans = plans
    return machine


ALPHABETS: dict[str, list[Any]] = {
    "hier": HIER_EVENTS,
    "shop": [*EVENTS["shop"], "BACK", "NOPE"],
    "invoice": [*EVENTS["invoice"], {"type": "ORDER", "amount": 0}, "NOPE"],
    "entry/exit toggle": ["toggle", "NOPE"],
    "counter": ["INC", "NOPE"],
    "history as initial": ["NEXT", "OUT", "BACK"],
    "composed": ["GO", {"type": "GO", "tag": "t"}, "NAME", "BACK", "NOPE"],
}


def effects(found: tuple[Any, ...]) -> list[Any]:
    return [e.to_json() for e in found]


def check_invisible(name: str, events: list[Any]) -> None:
    planned, reference, restored = (build(name, True), build(name, False), build(name, True))
    a, fa = planned.initial_transition()
    b, fb = reference.initial_transition()
    c, _ = restored.initial_transition()
    # an actor takes the compiled routes itself (not through ``Machine.step``)
    actor = create_actor(build(name, True), clock=SimulatedClock(), strict=False).start()
    assert effects(fa) == effects(fb)
    for index, event in enumerate(events):
        where = f"event {index} ({event!r})"
        a, fa = planned.transition(a, event)
        b, fb = reference.transition(b, event)
        c, fc = restored.transition(restored.restore(snapshot_to_json(c)), event)
        actor.send(event)
        assert snapshot_to_json(a) == snapshot_to_json(b), f"{where}: plans change the state"
        assert snapshot_to_json(actor.get_snapshot()) == snapshot_to_json(b), (
            f"{where}: an actor's routes change the state"
        )
        assert effects(fa) == effects(fb), f"{where}: plans change the effects"
        assert snapshot_to_json(c) == snapshot_to_json(a), f"{where}: restore changes it"
        assert effects(fc) == effects(fa), f"{where}: restore changes the effects"


@pytest.mark.parametrize("name", sorted(ALPHABETS))
def test_plans_are_invisible(name: str) -> None:
    @SETTINGS
    @given(st.lists(st.sampled_from(ALPHABETS[name]), max_size=40))
    def run(events: list[Any]) -> None:
        check_invisible(name, events)

    run()


def test_plans_are_kept_and_reused() -> None:
    """The comparison above proves something only if plans are really kept and taken: every
    shop event has a compiled route here (plain guards, user actions and assigns)."""
    machine = build("shop", True)
    snapshot, _ = machine.initial_transition()
    for event in [*EVENTS["shop"], {"type": "ADD", "price": 1}, "CHECKOUT", "BACK"]:
        snapshot, _ = machine.transition(snapshot, event)
    assert snapshot.value == "browsing"
    kept = {c.value: sorted(t.event for t in c.plans) for c in machine.configurations}
    assert kept == {
        "browsing": ["ADD", "CHECKOUT", "REMOVE"],
        "checkout": ["BACK", "PAY"],
        "paid": ["CONTINUE"],
    }
    routes = {
        c.value: sorted(kind for kind, route in c.routes.items() if route is not full_step)
        for c in machine.configurations
    }
    assert routes == {
        "browsing": ["ADD", "CHECKOUT", "REMOVE"],
        "checkout": ["BACK", "PAY"],
        "paid": ["CONTINUE"],
    }
    reference = build("shop", False)
    snapshot, _ = reference.initial_transition()
    for event in EVENTS["shop"]:
        snapshot, _ = reference.transition(snapshot, event)
    assert not any(c.plans or c.routes for c in reference.configurations)


def test_history_transitions_are_planned_afresh() -> None:
    """Where a history state leads depends on what it holds: never a kept plan."""
    machine = build("hier", True)
    snapshot, _ = machine.initial_transition()
    # t2 in r1.b leaves for idle (r2's history records its state); back restores it
    for remembered in ("d", "c"):
        for event in ["t2", "t1", "t2", "back"]:
            snapshot, _ = machine.transition(snapshot, event)
        assert snapshot.value == {"work": {"p": {"r1": "a", "r2": remembered}}}
    history_plans = [
        t
        for c in machine.configurations
        for t in c.plans
        if not isinstance(t, tuple) and t.has_history_target
    ]
    assert history_plans == []


def test_a_compound_entered_through_its_initial_history_is_never_a_kept_plan() -> None:
    machine = build("history as initial", True)
    snapshot, _ = machine.initial_transition()
    for remembered in ("a", "b", "a"):
        for event in ["NEXT", "OUT", "BACK"]:
            snapshot, _ = machine.transition(snapshot, event)
        assert snapshot.value == {"p": remembered}


def test_an_actor_with_plans_off_runs_the_same_actions() -> None:
    """Through an actor: the user actions are called with the same arguments either way."""
    calls: dict[bool, list[tuple[str, Any, Any]]] = {True: [], False: []}
    for plans in (True, False):
        impl = implementations()
        for name in ("startCall", "endCall"):
            impl["actions"][name] = (
                lambda n, p: lambda c, e: calls[p].append((n, dict(c), dict(e)))
            )(name, plans)
        machine = create_machine(CONFIGS["invoice"], **impl)
        machine.plans = plans
        actor = create_actor(machine, clock=SimulatedClock()).start()
        for event in EVENTS["invoice"] * 3:
            actor.send(event)
        assert actor.get_snapshot().value == "pending"
    assert calls[True] == calls[False]
    assert len(calls[True]) == 3 * 8


def test_eventless_transitions_after_a_route_are_compiled_too() -> None:
    """The invoice's ORDER leads into ``validating``, whose eventless guard decides where it
    goes on: both microsteps are taken by the compiled route (so the comparison above covers
    it), and an order that fails validation still goes the other way."""
    machine = build("invoice", True)
    snapshot, _ = machine.initial_transition()
    pending = snapshot.configuration
    snapshot, _ = machine.transition(snapshot, {"type": "ORDER", "amount": 10})
    assert snapshot.value == "fetching_customer"
    assert pending.routes["ORDER"] is not full_step
    validating = next(c for c in machine.configurations if c.value == "validating")
    assert validating.eventless is not None and len(validating.eventless.choices) == 2
    again, _ = machine.transition(machine.initial_transition()[0], {"type": "ORDER", "amount": 0})
    assert again.value == "failed"


def test_composed_routes_take_every_event_of_their_chart() -> None:
    """The comparison above covers the composed forms only if they are taken: every event of
    the ``composed`` chart outside ``check`` has a route here, and arriving in ``check`` is
    compiled too, including the rest there when its eventless guards all fail."""
    machine = build("composed", True)
    snapshot, _ = machine.initial_transition()
    values = []
    for event in ["GO", "NAME", *["GO"] * 6, "NAME", "BACK"]:
        snapshot, _ = machine.transition(snapshot, event)
        values.append(snapshot.value)
    assert values[7] == "check" and values.count("even") == 2  # n == 5 rests in check
    routes = {
        c.value: sorted(kind for kind, route in c.routes.items() if route is not full_step)
        for c in machine.configurations
        if c.routes
    }
    # a configuration with eventless transitions takes its events by the full step
    assert routes == {"idle": ["GO", "NAME"], "even": ["GO"], "check": []}
    check = next(c for c in machine.configurations if c.value == "check")
    assert check.eventless is not None and len(check.eventless.choices) == 2
    assert snapshot.value == "idle" and snapshot.context["tag"] is None


def test_events_skip_normalizing_only_when_already_normal() -> None:
    """``transition`` and ``send`` take a string seen before or a frozen event without
    calling ``normalize_event``: the same snapshots as the plain forms, and a frozen mapping
    without a string ``type`` is still refused with an ``EventError``."""
    from statecharts.errors import EventError
    from statecharts.frozen import FrozenDict

    machine = build("shop", True)
    frozen = [FrozenDict(e) if isinstance(e, dict) else e for e in EVENTS["shop"]]
    a, _ = machine.initial_transition()
    b = a
    for plain, fast in zip(EVENTS["shop"] * 2, frozen * 2, strict=True):
        a, _ = machine.transition(a, plain)
        b, _ = machine.transition(b, fast)
        assert snapshot_to_json(a) == snapshot_to_json(b)
    actor = create_actor(machine).start()
    for event in frozen * 2:
        actor.send(event)
    assert snapshot_to_json(actor.get_snapshot()) == snapshot_to_json(a)
    for bad in (FrozenDict(price=5), FrozenDict(type=5)):
        with pytest.raises(EventError):
            machine.transition(a, bad)
        with pytest.raises(EventError):
            actor.send(bad)
