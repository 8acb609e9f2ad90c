"""The benchmark machines, as XState v5 configs (the same dicts drive this engine and XState).

flat     2-state toggle: ``off <-> on`` on ``toggle``.
hier     ``work`` (compound) > ``p`` (parallel) > ``r1`` {a <-> b on t1}, ``r2`` {c <-> d on t2};
         events alternate t1 / t2, each changing one region's leaf.
reenter  the hier chart; events alternate ``leave`` (work -> idle: exits 6 states) and
         ``enter`` (idle -> work: enters 6 states).
counter  guarded counter: ``INC`` is a targetless transition guarded on the context
         (``count < 10**12``) whose ``assign`` increments ``count``; nothing is exited or entered,
         so no transition-plan cache can skip the guard and the assign.

Each case also says which events it sends and how to check the final state after ``n`` events,
so every subject (this engine, the Python peers, XState) checks the same thing.
"""

from __future__ import annotations

from typing import Any

FLAT: dict[str, Any] = {
    "id": "toggle",
    "initial": "off",
    "states": {"off": {"on": {"toggle": "on"}}, "on": {"on": {"toggle": "off"}}},
}

HIER: dict[str, Any] = {
    "id": "hier",
    "initial": "work",
    "states": {
        "work": {
            "initial": "p",
            "on": {"leave": "idle"},
            "states": {
                "p": {
                    "type": "parallel",
                    "states": {
                        "r1": {
                            "initial": "a",
                            "states": {"a": {"on": {"t1": "b"}}, "b": {"on": {"t1": "a"}}},
                        },
                        "r2": {
                            "initial": "c",
                            "states": {"c": {"on": {"t2": "d"}}, "d": {"on": {"t2": "c"}}},
                        },
                    },
                }
            },
        },
        "idle": {"on": {"enter": "work"}},
    },
}

#: The guard's bound: far above any event count, so every INC takes the guarded branch.
COUNTER_LIMIT = 10**12

COUNTER: dict[str, Any] = {
    "id": "counter",
    "initial": "counting",
    "context": {"count": 0},
    "states": {
        "counting": {
            "on": {"INC": [{"guard": "notTooMany", "actions": "inc"}, {"target": "done"}]}
        },
        "done": {},
    },
}

#: Events each case sends, cycled: event i is EVENTS[case][i % len].
EVENTS: dict[str, tuple[str, ...]] = {
    "flat": ("toggle",),
    "hier": ("t1", "t2"),
    "reenter": ("leave", "enter"),
    "counter": ("INC",),
}

CONFIGS: dict[str, dict[str, Any]] = {
    "flat": FLAT,
    "hier": HIER,
    "reenter": HIER,
    "counter": COUNTER,
}


def event_list(case: str, n: int) -> list[str]:
    """The ``n`` events a run of ``case`` sends, built before the timer starts."""
    events = EVENTS[case]
    return [events[i % len(events)] for i in range(n)]


def expected_value(case: str, n: int) -> Any:
    """The XState state value after ``n`` events of ``case`` from the initial state."""
    if case == "flat":
        return "off" if n % 2 == 0 else "on"
    if case == "hier":
        # t1 is sent ceil(n/2) times, t2 floor(n/2) times
        r1 = "a" if (n + 1) // 2 % 2 == 0 else "b"
        r2 = "c" if n // 2 % 2 == 0 else "d"
        return {"work": {"p": {"r1": r1, "r2": r2}}}
    if case == "reenter":
        return {"work": {"p": {"r1": "a", "r2": "c"}}} if n % 2 == 0 else "idle"
    if case == "counter":
        return "counting"
    raise KeyError(case)


def expected_leaves(case: str, n: int) -> frozenset[str]:
    """The names of the active atomic states after ``n`` events (for peers without values)."""
    return frozenset(_leaves(expected_value(case, n)))


def _leaves(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    out: list[str] = []
    for child in value.values():
        out.extend(_leaves(child))
    return out
