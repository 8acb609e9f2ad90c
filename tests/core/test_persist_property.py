"""Property: persisting and restoring through real JSON bytes after every step behaves exactly
like never persisting, and the engine's fast-path cache is invisible.

For random event sequences over several example machines (guards and context, history,
parallel regions with eventless transitions and raised events, timers, final states), three
runs go in lockstep:

* ``plain``: one machine, snapshots passed along in memory;
* ``persisted``: a second machine instance (as after a process restart) that gets every
  snapshot back from ``snapshot_to_json`` bytes via ``machine.restore(bytes)``;
* ``unplanned``: a third instance with ``machine.plans = False``, which computes every
  microstep's plan afresh with the reference algorithm instead of reusing the plans kept on
  the configurations.

``STATECHARTS_PROPERTY_EXAMPLES`` raises the number of sequences per machine (default 60).

After every step the persisted form (value, context, status, output, history, timers, ...) and
the JSON of the effects must be identical across the three.
"""

from __future__ import annotations

import os
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statecharts import (
    and_,
    assign,
    cancel,
    create_machine,
    enqueue_actions,
    not_,
    raise_,
    snapshot_to_json,
    state_in,
)
from statecharts.machine import Machine
from statecharts.routes import full_step

from .corekit import effects_json

TIMER = "@timer"  # a step that fires the earliest pending timer at its due time


def _note(context: Any, event: Any, **params: Any) -> None:
    return None


def _inc(by: int = 1) -> Any:
    return assign({"n": lambda c, e: c["n"] + by})


COUNTER = {
    "id": "counter",
    "initial": "idle",
    "context": {"n": 0, "total": 0},
    "states": {
        "idle": {"on": {"START": "running", "TOGGLE": "off"}},
        "off": {"on": {"TOGGLE": "idle"}},
        "running": {
            "tags": ["busy"],
            "on": {
                "INC": [
                    {"guard": "below_limit", "actions": [_inc(), "note"]},
                    {"target": "full", "actions": {"type": "note", "params": {"why": "full"}}},
                ],
                "ADD": {
                    "guard": {"type": "at_least", "params": {"amount": 2}},
                    "actions": assign({"total": lambda c, e: c["total"] + e["amount"]}),
                },
                "STOP": "idle",
            },
        },
        "full": {
            "always": {"guard": lambda c, e: c["total"] > 10, "target": "idle"},
            "on": {
                "RESET": {"target": "idle", "actions": assign({"n": 0})},
                "ADD": {"actions": assign({"total": lambda c, e: c["total"] + e["amount"]})},
            },
        },
    },
}
COUNTER_EVENTS = [
    "START",
    "TOGGLE",
    "INC",
    "STOP",
    "RESET",
    {"type": "ADD", "amount": 1},
    {"type": "ADD", "amount": 4},
    "NOPE",
]

HISTORY = {
    "id": "player",
    "initial": "on",
    "states": {
        "on": {
            "initial": "stopped",
            "on": {"POWER": "off"},
            "states": {
                "stopped": {"on": {"PLAY": "playing"}},
                "playing": {
                    "initial": "normal",
                    "on": {"STOP": "stopped"},
                    "states": {"normal": {"on": {"FF": "fast"}}, "fast": {"on": {"FF": "normal"}}},
                },
                "shallow": {"type": "history"},
                "deep": {"type": "history", "history": "deep", "target": "playing"},
            },
        },
        "off": {"on": {"POWER": "on.shallow", "RESUME": "on.deep", "BOOT": "on"}},
    },
}
HISTORY_EVENTS = ["PLAY", "STOP", "FF", "POWER", "RESUME", "BOOT"]

PARALLEL = {
    "id": "desk",
    "type": "parallel",
    "context": {"pings": 0},
    "states": {
        "light": {
            "initial": "dim",
            "states": {
                "dim": {"on": {"SWITCH": "bright"}},
                "bright": {"on": {"SWITCH": "dim"}, "entry": raise_("LIT")},
            },
        },
        "fan": {
            "initial": "stopped",
            "states": {
                "stopped": {
                    "always": {
                        "guard": and_(state_in("#desk.light.bright"), not_("many_pings")),
                        "target": "spinning",
                    },
                    "on": {
                        "LIT": {"actions": [assign({"pings": lambda c, e: c["pings"] + 1}), "note"]}
                    },
                },
                "spinning": {
                    "on": {"SWITCH": "stopped", "LIT": "stopped"},
                    "initial": "slow",
                    "states": {
                        "slow": {"on": {"FAST": "quick"}},
                        "quick": {"on": {"FAST": "done"}},
                        "done": {"type": "final"},
                    },
                    "onDone": {"target": "stopped", "actions": "note"},
                },
                "h": {"type": "history", "history": "deep"},
            },
        },
        "mode": {
            "initial": "work",
            "on": {"PANIC": {"target": ".work", "reenter": True}},
            "states": {
                "work": {"on": {"BREAK": "rest", "*": {"actions": "note"}}},
                "rest": {"on": {"BREAK": "work", "mouse.*": "work"}},
            },
        },
    },
}
PARALLEL_EVENTS = ["SWITCH", "FAST", "BREAK", "PANIC", "mouse.move", "OTHER", "LIT"]

TIMERS = {
    "id": "door",
    "initial": "closed",
    "context": {"opened": 0},
    "states": {
        "closed": {
            "on": {
                "OPEN": {
                    "target": "open",
                    "actions": assign({"opened": lambda c, e: c["opened"] + 1}),
                }
            }
        },
        "open": {
            "after": {"1000": "closing", "slow": {"target": "alarm"}},
            "entry": raise_("REMIND", delay=300, id="remind"),
            "on": {
                "CLOSE": "closing",
                "HOLD": {"actions": cancel("remind")},
                "REMIND": {"actions": "note"},
            },
        },
        "closing": {"after": {"200": "closed"}, "on": {"OPEN": "open"}},
        "alarm": {"type": "final", "output": {"alarm": True}},
    },
    "output": lambda c, e: {"opened": c["opened"], **e["output"]},
}
TIMERS_EVENTS = ["OPEN", "CLOSE", "HOLD", TIMER, TIMER]

FINISH = {
    "id": "job",
    "initial": "work",
    "context": {"steps": 0},
    "states": {
        "work": {
            "initial": "a",
            "onDone": "review",
            "states": {
                "a": {
                    "on": {
                        "NEXT": {
                            "target": "b",
                            "actions": assign({"steps": lambda c, e: c["steps"] + 1}),
                        }
                    }
                },
                "b": {"on": {"NEXT": "fin", "BACK": "a"}},
                "fin": {"type": "final", "output": lambda c, e: {"steps": c["steps"]}},
            },
        },
        "review": {"on": {"APPROVE": "approved", "REJECT": "work"}},
        "approved": {"type": "final"},
    },
    "output": {"approved": True},
}
FINISH_EVENTS = ["NEXT", "BACK", "APPROVE", "REJECT"]


def _note_when_positive(context: Any, event: Any, enqueue: Any, check: Any) -> None:
    if context["n"] > 0:
        enqueue("note")


DYNAMIC = {  # built-in actions whose outcome depends on context or pending timers
    "id": "dynamic",
    "initial": "a",
    "context": {"n": 0},
    "states": {
        "a": {
            "on": {
                "INC": {"actions": _inc()},
                "MAYBE_NOTE": {"actions": enqueue_actions(_note_when_positive)},
                "MAYBE_GO": {
                    "actions": raise_(lambda c, e: {"type": "GO" if c["n"] > 1 else "NO"})
                },
                "ARM": {"actions": raise_("INC", delay=50, id="later")},
                "DISARM": {"actions": cancel("later")},
                "GO": "b",
            }
        },
        "b": {"on": {"BACK": "a"}},
    },
}
DYNAMIC_EVENTS = ["INC", "MAYBE_NOTE", "MAYBE_GO", "ARM", "DISARM", "BACK"]

IMPLEMENTATIONS: dict[str, Any] = {
    "actions": {"note": _note},
    "guards": {
        "below_limit": lambda c, e: c["n"] < 3,
        "at_least": lambda c, e, amount: e["amount"] >= amount,
        "many_pings": lambda c, e: c["pings"] > 3,
    },
    "delays": {"slow": lambda c, e: 2500 + 100 * c["opened"]},
}

MACHINES = {
    "counter": (COUNTER, COUNTER_EVENTS),
    "history": (HISTORY, HISTORY_EVENTS),
    "parallel": (PARALLEL, PARALLEL_EVENTS),
    "timers": (TIMERS, TIMERS_EVENTS),
    "finish": (FINISH, FINISH_EVENTS),
    "dynamic": (DYNAMIC, DYNAMIC_EVENTS),
}


def make(name: str, plans: bool = True) -> Machine:
    machine = create_machine(MACHINES[name][0], **IMPLEMENTATIONS)
    machine.plans = plans
    return machine


class Run:
    """One machine driven step by step, optionally through JSON bytes after every step."""

    def __init__(self, machine: Machine, persist: bool) -> None:
        self.machine = machine
        self.persist = persist
        self.now = 1_700_000_000_000
        snapshot, effects = machine.initial_transition(now=self.now)
        self.snapshot = self._through_json(snapshot)
        self.last_effects = effects_json(effects)

    def _through_json(self, snapshot: Any) -> Any:
        return self.machine.restore(snapshot_to_json(snapshot)) if self.persist else snapshot

    def step(self, event: Any) -> None:
        if event == TIMER:
            timers = self.snapshot.timers
            if not timers:
                self.last_effects = b"[]"
                return
            self.now = max(self.now, timers[0].due_at)
            snapshot, effects = self.machine.fire_timer(self.snapshot, timers[0].id, now=self.now)
        else:
            self.now += 7
            snapshot, effects = self.machine.transition(self.snapshot, event, now=self.now)
        self.snapshot = self._through_json(snapshot)
        self.last_effects = effects_json(effects)

    def observed(self) -> tuple[bytes, bytes]:
        state = orjson.dumps(self.machine.persist(self.snapshot), option=orjson.OPT_SORT_KEYS)
        return state, self.last_effects


def check_lockstep(name: str, events: list[Any]) -> None:
    runs = [
        Run(make(name), persist=False),
        Run(make(name), persist=True),
        Run(make(name, plans=False), persist=False),
    ]
    assert len({run.observed() for run in runs}) == 1
    for index, event in enumerate(events):
        for run in runs:
            run.step(event)
        plain, persisted, unplanned = (run.observed() for run in runs)
        assert persisted == plain, f"step {index} ({event!r}) differs after persist/restore"
        assert unplanned == plain, f"step {index} ({event!r}) differs without kept plans"


def event_lists(name: str) -> st.SearchStrategy[list[Any]]:
    alphabet = [*MACHINES[name][1], TIMER]
    return st.lists(st.sampled_from(alphabet), max_size=30)


# STATECHARTS_PROPERTY_EXAMPLES=2000 for a longer, opt-in soak
EXAMPLES = int(os.environ.get("STATECHARTS_PROPERTY_EXAMPLES", "60"))
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@SETTINGS
@given(event_lists("counter"))
def test_counter_with_guards_and_context(events: list[Any]) -> None:
    check_lockstep("counter", events)


@SETTINGS
@given(event_lists("history"))
def test_shallow_and_deep_history(events: list[Any]) -> None:
    check_lockstep("history", events)


@SETTINGS
@given(event_lists("parallel"))
def test_parallel_with_eventless_raise_and_wildcards(events: list[Any]) -> None:
    check_lockstep("parallel", events)


@SETTINGS
@given(event_lists("timers"))
def test_timers_and_delayed_events(events: list[Any]) -> None:
    check_lockstep("timers", events)


@SETTINGS
@given(event_lists("finish"))
def test_final_states_and_output(events: list[Any]) -> None:
    check_lockstep("finish", events)


@SETTINGS
@given(event_lists("dynamic"))
def test_built_in_actions_that_depend_on_state(events: list[Any]) -> None:
    check_lockstep("dynamic", events)


CACHE_REGRESSIONS = [
    # a cancel of a timer that is not pending changes nothing, but the next one might
    ("timers", ["OPEN", "HOLD", "HOLD", "CLOSE", "OPEN", "HOLD"]),
    ("dynamic", ["ARM", "DISARM", "DISARM", "ARM", "DISARM"]),
    # enqueue_actions that enqueues nothing at first
    ("dynamic", ["MAYBE_NOTE", "INC", "MAYBE_NOTE"]),
    # a raised event computed from context
    ("dynamic", ["MAYBE_GO", "INC", "INC", "MAYBE_GO"]),
]


@pytest.mark.parametrize(("name", "events"), CACHE_REGRESSIONS)
def test_cache_regressions(name: str, events: list[Any]) -> None:
    check_lockstep(name, events)


def test_kept_plans_are_actually_reused() -> None:
    """Without reuse the comparison above would prove nothing; without plans none are kept."""
    planned, unplanned = make("counter"), make("counter", plans=False)
    for machine in (planned, unplanned):
        snapshot, _ = machine.initial_transition()
        for event in ["TOGGLE", "TOGGLE", "TOGGLE", "TOGGLE", "START", "INC", "STOP", "START"]:
            snapshot, _ = machine.transition(snapshot, event)
        assert snapshot.value == "running"
    kept = {
        c.value: (
            len(c.plans),
            sorted(kind for kind, route in c.routes.items() if route is not full_step),
        )
        for c in planned.configurations
        if c.plans or c.routes
    }
    # every event here is planned and compiled into a route (both of INC's candidates, the
    # second with the eventless transition it leads to, planned on "full")
    assert kept == {
        "idle": (2, ["START", "TOGGLE"]),
        "off": (1, ["TOGGLE"]),
        "running": (3, ["INC", "STOP"]),
        "full": (1, []),
    }
    full = next(c for c in planned.configurations if c.value == "full")
    assert full.eventless is not None and len(full.eventless.choices) == 1
    assert not any(c.plans or c.routes for c in unplanned.configurations)
    check_lockstep("counter", ["TOGGLE"] * 4 + ["START", "STOP"] * 3)


def test_every_example_machine_reaches_its_interesting_parts() -> None:
    """The alphabets drive the machines into history, timers, done and error-free loops."""
    walks: dict[str, tuple[list[Any], Any]] = {
        "counter": (["START", "INC", "INC", "INC", "INC"], "full"),
        "history": (["PLAY", "FF", "POWER", "RESUME"], {"on": {"playing": "fast"}}),
        "parallel": (["SWITCH"], {"light": "bright", "fan": {"spinning": "slow"}, "mode": "work"}),
        "timers": (["OPEN", TIMER, TIMER], "closing"),
        "finish": (["NEXT", "NEXT", "APPROVE"], "approved"),
    }
    for name, (events, value) in walks.items():
        run = Run(make(name), persist=True)
        for event in events:
            run.step(event)
        assert run.snapshot.value == value, name
    done = Run(make("finish"), persist=True)
    for event in ["NEXT", "NEXT", "APPROVE"]:
        done.step(event)
    assert done.snapshot.status == "done"
    assert done.snapshot.output == {"approved": True}
