"""The run-to-completion semantics of issue 2 as tables.

Each row: a machine config, the events that bring it to the start state (``given``; ``None``
means "record from the initial transition"), the events under test, and what must come out:
the state value, the context, and the order of user actions. Every state records its entry as
``+path`` and its exit as ``-path`` (root: ``(root)``), so the action lists spell out
exit -> transition -> entry order. Each row runs through the pure core (``RunAction`` effects)
and through the actor runtime (user actions that really run and append to a list).

Expected values follow XState v5 (packages/core/src/stateUtils.ts), which follows the SCXML
algorithm except where docs/semantics.md says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from statecharts import and_, assign, not_, or_, raise_, state_in

from .corekit import build, plain, run_actor, run_pure


@dataclass
class Case:
    """One row of a semantics table."""

    name: str
    config: dict[str, Any]
    events: list[Any]
    value: Any
    actions: list[str] | None = None
    given: list[Any] | None = field(default_factory=list)
    context: dict[str, Any] | None = None
    status: str = "active"
    output: Any = None
    guards: dict[str, Any] = field(default_factory=dict)
    modes: tuple[str, ...] = ("pure", "actor")


def _check(case: Case, mode: str) -> None:
    if mode == "pure":
        outcome = run_pure(build(case.config, guards=case.guards), case.events, case.given)
    else:
        outcome = run_actor(case.config, case.events, case.given, guards=case.guards)
    snapshot = outcome.snapshot
    assert plain(snapshot.value) == case.value
    if case.actions is not None:
        assert outcome.actions == case.actions
    if case.context is not None:
        assert plain(snapshot.context) == case.context
    assert snapshot.status == case.status
    assert plain(snapshot.output) == case.output


def table(cases: list[Case]) -> Any:
    """Parametrize a test over ``cases`` x {pure core, actor runtime}."""
    return pytest.mark.parametrize(
        ("case", "mode"),
        [(c, m) for c in cases for m in c.modes],
        ids=[f"{c.name}-{m}" for c in cases for m in c.modes],
    )


def yes(context: Any, event: Any) -> bool:
    return True


def no(context: Any, event: Any) -> bool:
    return False


# -- hierarchy: exit/entry sets via the least common ancestor -----------------------------------

NESTED = {
    "id": "m",
    "initial": "a",
    "states": {
        "a": {
            "initial": "a1",
            "on": {"LEAVE": {"target": "b", "actions": ["t"]}},
            "states": {
                "a1": {"on": {"NEXT": "a2", "FAR": {"target": "#m.b.b2", "actions": ["t1", "t2"]}}},
                "a2": {},
            },
        },
        "b": {"initial": "b1", "states": {"b1": {}, "b2": {}}},
    },
}

HIERARCHY = [
    Case("initial-entry-order", NESTED, [], {"a": "a1"}, ["+(root)", "+a", "+a.a1"], given=None),
    Case("sibling-stays-in-parent", NESTED, ["NEXT"], {"a": "a2"}, ["-a.a1", "+a.a2"]),
    Case(
        "across-compounds-exit-transition-entry",
        NESTED,
        ["FAR"],
        {"b": "b2"},
        ["-a.a1", "-a", "t1", "t2", "+b", "+b.b2"],
    ),
    Case(
        "ancestor-handles-for-deep-child",
        NESTED,
        ["LEAVE"],
        {"b": "b1"},
        ["-a.a1", "-a", "t", "+b", "+b.b1"],
    ),
    Case("unknown-event-changes-nothing", NESTED, ["NOPE"], {"a": "a1"}, []),
    Case(
        "exit-and-entry-lists-keep-their-order",
        {
            "id": "m",
            "initial": "a",
            "states": {
                "a": {"exit": ["x1", "x2"], "on": {"E": {"target": "b", "actions": ["t1", "t2"]}}},
                "b": {"entry": ["e1", "e2"]},
            },
        },
        ["E"],
        "b",
        ["-a", "x1", "x2", "t1", "t2", "+b", "e1", "e2"],
    ),
    Case(
        "child-to-own-parent-reenters-parent",
        {
            "id": "m",
            "initial": "p",
            "states": {
                "p": {
                    "initial": "x",
                    "states": {"x": {"on": {"GO": "y"}}, "y": {"on": {"UP": {"target": "#m.p"}}}},
                }
            },
        },
        ["UP"],
        {"p": "x"},
        ["-p.y", "-p", "+p", "+p.x"],
        given=["GO"],
    ),
]


@table(HIERARCHY)
def test_hierarchy(case: Case, mode: str) -> None:
    _check(case, mode)


# -- reenter: false (default) vs true ------------------------------------------------------------

FOO = {
    "id": "m",
    "initial": "foo",
    "states": {
        "foo": {
            "initial": "a",
            "states": {
                "a": {
                    "on": {
                        "NEXT": "b",
                        "SELF": {"target": "a", "actions": ["t"]},
                        "SELF_REENTER": {"target": "a", "reenter": True, "actions": ["t"]},
                    }
                },
                "b": {"initial": "b1", "states": {"b1": {}}},
            },
            "on": {
                "CLICK": ".b",
                "CLICK_REENTER": {"target": ".b", "reenter": True},
                "RESET": {"target": "foo", "actions": ["t"]},
                "RESET_REENTER": {"target": "foo", "reenter": True, "actions": ["t"]},
                "TO_B": {"target": "foo.b", "reenter": True},
            },
        },
    },
}

ROOTED = {
    "id": "m",
    "initial": "a",
    "on": {"HOME": ".a", "HOME_REENTER": {"target": ".a", "reenter": True}},
    "states": {"a": {"on": {"NEXT": "b"}}, "b": {}},
}

REENTER = [
    Case(
        "to-child-does-not-reenter-source",
        FOO,
        ["CLICK"],
        {"foo": {"b": "b1"}},
        ["-foo.a", "+foo.b", "+foo.b.b1"],
    ),
    Case(
        "to-child-with-reenter-exits-and-enters-source",
        FOO,
        ["CLICK_REENTER"],
        {"foo": {"b": "b1"}},
        ["-foo.a", "-foo", "+foo", "+foo.b", "+foo.b.b1"],
    ),
    Case("atomic-self-transition-runs-only-its-actions", FOO, ["SELF"], {"foo": "a"}, ["t"]),
    Case(
        "atomic-self-transition-with-reenter",
        FOO,
        ["SELF_REENTER"],
        {"foo": "a"},
        ["-foo.a", "t", "+foo.a"],
    ),
    Case(
        "compound-self-transition-resets-children-only",
        FOO,
        ["RESET"],
        {"foo": "a"},
        ["-foo.b.b1", "-foo.b", "t", "+foo.a"],
        given=["NEXT"],
    ),
    Case(
        "compound-self-transition-with-reenter",
        FOO,
        ["RESET_REENTER"],
        {"foo": "a"},
        ["-foo.b.b1", "-foo.b", "-foo", "t", "+foo", "+foo.a"],
        given=["NEXT"],
    ),
    Case(
        "reenter-to-descendant-by-path",
        FOO,
        ["TO_B"],
        {"foo": {"b": "b1"}},
        ["-foo.a", "-foo", "+foo", "+foo.b", "+foo.b.b1"],
    ),
    Case("root-to-child-keeps-root", ROOTED, ["HOME"], "a", ["-b", "+a"], given=["NEXT"]),
    Case(
        "root-to-child-with-reenter-exits-the-root",
        ROOTED,
        ["HOME_REENTER"],
        "a",
        ["-b", "-(root)", "+(root)", "+a"],
        given=["NEXT"],
    ),
    Case(
        "internal-transition-to-deep-descendant",
        {
            "id": "m",
            "initial": "a1",
            "states": {
                "a1": {
                    "initial": "a11",
                    "on": {"REENTER": ".a11.a111"},
                    "states": {"a11": {"initial": "a111", "states": {"a111": {}}}},
                }
            },
        },
        ["REENTER"],
        {"a1": {"a11": "a111"}},
        ["-a1.a11.a111", "-a1.a11", "+a1.a11", "+a1.a11.a111"],
    ),
]


@table(REENTER)
def test_reenter(case: Case, mode: str) -> None:
    _check(case, mode)


# -- targetless and forbidden transitions, innermost-first, document order ----------------------

SELECTION_CONFIG = {
    "id": "m",
    "initial": "p",
    "states": {
        "p": {
            "initial": "a",
            "on": {
                "E": "#m.out",
                "G": "#m.out",
                "N": "#m.out",
                "PARENT": {"actions": ["pt"]},
                "BOTH": {"actions": ["parent_t"]},
            },
            "states": {
                "a": {
                    "on": {
                        "E": {},  # forbidden: swallows E
                        "N": None,  # forbidden, null form (JSON)
                        "T": {"actions": ["t"]},  # targetless
                        "BOTH": {"actions": ["child_t"]},
                        "G": {"guard": "no", "target": "b"},  # guard fails: bubbles up
                        "ORDER": [{"guard": "no", "target": "b"}, {"target": "c"}, {"target": "b"}],
                        "NEXT": "b",
                    }
                },
                "b": {},
                "c": {},
            },
        },
        "out": {},
    },
}

SELECTION = [
    Case(
        "targetless-runs-actions-without-exit-or-entry", SELECTION_CONFIG, ["T"], {"p": "a"}, ["t"]
    ),
    Case(
        "targetless-on-parent-keeps-the-child",
        SELECTION_CONFIG,
        ["PARENT"],
        {"p": "b"},
        ["pt"],
        given=["NEXT"],
    ),
    Case("forbidden-swallows-event-before-parent", SELECTION_CONFIG, ["E"], {"p": "a"}, []),
    Case("forbidden-null-form", SELECTION_CONFIG, ["N"], {"p": "a"}, []),
    Case(
        "without-forbidden-parent-handles",
        SELECTION_CONFIG,
        ["E"],
        "out",
        ["-p.b", "-p", "+out"],
        given=["NEXT"],
    ),
    Case("innermost-wins-over-parent", SELECTION_CONFIG, ["BOTH"], {"p": "a"}, ["child_t"]),
    Case("failed-guard-lets-parent-handle", SELECTION_CONFIG, ["G"], "out", ["-p.a", "-p", "+out"]),
    Case(
        "document-order-first-enabled-wins",
        SELECTION_CONFIG,
        ["ORDER"],
        {"p": "c"},
        ["-p.a", "+p.c"],
    ),
]


@table(SELECTION)
def test_selection(case: Case, mode: str) -> None:
    case.guards = {"no": no}
    _check(case, mode)


# -- parallel regions -----------------------------------------------------------------------------


def parallel_config(
    r1_on: dict[str, Any], r2_on: dict[str, Any], p_on: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "id": "m",
        "initial": "P",
        "context": {"n": 0},
        "states": {
            "P": {
                "type": "parallel",
                "on": p_on or {},
                "states": {
                    "r1": {"initial": "a1", "states": {"a1": {"on": r1_on}, "a2": {}}},
                    "r2": {"initial": "b1", "states": {"b1": {"on": r2_on}, "b2": {}}},
                },
            },
            "out": {
                "on": {
                    "IN": "#m.P.r2.b2",
                    "IN_BOTH": {"target": ["#m.P.r1.a2", "#m.P.r2.b2"]},
                    "IN_P": "P",
                }
            },
        },
    }


BOTH_REGIONS = parallel_config(
    {"E": {"target": "a2", "actions": ["t1"]}},
    {"E": {"target": "b2", "actions": ["t2"]}},
    {"E": "#m.out", "X": "#m.out"},
)
ONE_REGION = parallel_config(
    {"E": {"target": "a2", "actions": ["t1"]}},
    {},
    {"E": "#m.out", "OUT": {"target": "#m.out", "actions": ["t"]}},
)
LEAVING_R1 = parallel_config(
    {"E": {"target": "#m.out", "actions": ["t1"]}}, {"E": {"target": "b2", "actions": ["t2"]}}
)
LEAVING_R2 = parallel_config(
    {"E": {"target": "a2", "actions": ["t1"]}}, {"E": {"target": "#m.out", "actions": ["t2"]}}
)
MIXED = parallel_config({"E": {"actions": ["t1"]}}, {"E": {"target": "b2", "actions": ["t2"]}})
CROSS = parallel_config({"X": {"target": "#m.P.r2.b2", "actions": ["t"]}}, {})
GUARDS_BEFORE_ASSIGN = parallel_config(
    {"E": {"target": "a2", "actions": [assign({"n": 1}), "t1"]}},
    {"E": [{"guard": "n_is_0", "target": "b2", "actions": ["t2"]}]},
)

PARALLEL = [
    Case(
        "initial-entry-in-document-order",
        BOTH_REGIONS,
        [],
        {"P": {"r1": "a1", "r2": "b1"}},
        ["+(root)", "+P", "+P.r1", "+P.r1.a1", "+P.r2", "+P.r2.b1"],
        given=None,
    ),
    Case(
        "both-regions-take-the-event",
        BOTH_REGIONS,
        ["E"],
        {"P": {"r1": "a2", "r2": "b2"}},
        ["-P.r2.b1", "-P.r1.a1", "t1", "t2", "+P.r1.a2", "+P.r2.b2"],
    ),
    Case(
        "one-region-moves-other-untouched-parent-hidden",
        ONE_REGION,
        ["E"],
        {"P": {"r1": "a2", "r2": "b1"}},
        ["-P.r1.a1", "t1", "+P.r1.a2"],
    ),
    Case(
        "leaving-parallel-exits-reverse-document-order",
        ONE_REGION,
        ["OUT"],
        "out",
        ["-P.r2.b1", "-P.r2", "-P.r1.a1", "-P.r1", "-P", "t", "+out"],
    ),
    Case(
        "entering-one-region-target-defaults-the-other",
        ONE_REGION,
        ["IN"],
        {"P": {"r1": "a1", "r2": "b2"}},
        ["-out", "+P", "+P.r1", "+P.r1.a1", "+P.r2", "+P.r2.b2"],
        given=["OUT"],
    ),
    Case(
        "multiple-targets-one-per-region",
        ONE_REGION,
        ["IN_BOTH"],
        {"P": {"r1": "a2", "r2": "b2"}},
        ["-out", "+P", "+P.r1", "+P.r1.a2", "+P.r2", "+P.r2.b2"],
        given=["OUT"],
    ),
    Case(
        "entering-parallel-enters-every-region",
        ONE_REGION,
        ["IN_P"],
        {"P": {"r1": "a1", "r2": "b1"}},
        ["-out", "+P", "+P.r1", "+P.r1.a1", "+P.r2", "+P.r2.b1"],
        given=["OUT"],
    ),
    Case(
        "conflict-earlier-region-leaving-wins",
        LEAVING_R1,
        ["E"],
        "out",
        ["-P.r2.b1", "-P.r2", "-P.r1.a1", "-P.r1", "-P", "t1", "+out"],
    ),
    Case(
        "conflict-earlier-region-local-wins",
        LEAVING_R2,
        ["E"],
        {"P": {"r1": "a2", "r2": "b1"}},
        ["-P.r1.a1", "t1", "+P.r1.a2"],
    ),
    Case(
        "targetless-in-one-region-move-in-the-other",
        MIXED,
        ["E"],
        {"P": {"r1": "a1", "r2": "b2"}},
        ["-P.r2.b1", "t1", "t2", "+P.r2.b2"],
    ),
    # XState: the domain of a cross-region transition is the parallel state itself, which is
    # neither exited nor entered (SCXML would exit and re-enter P): see docs/semantics.md
    Case(
        "cross-region-transition-keeps-the-parallel-state",
        CROSS,
        ["X"],
        {"P": {"r1": "a1", "r2": "b2"}},
        ["-P.r2.b1", "-P.r2", "-P.r1.a1", "-P.r1", "t", "+P.r1", "+P.r1.a1", "+P.r2", "+P.r2.b2"],
    ),
    Case(
        "guards-of-all-regions-see-context-before-any-assign",
        GUARDS_BEFORE_ASSIGN,
        ["E"],
        {"P": {"r1": "a2", "r2": "b2"}},
        ["-P.r2.b1", "-P.r1.a1", "t1", "t2", "+P.r1.a2", "+P.r2.b2"],
        context={"n": 1},
        guards={"n_is_0": lambda c, e: c["n"] == 0},
    ),
]


@table(PARALLEL)
def test_parallel(case: Case, mode: str) -> None:
    _check(case, mode)


# -- history --------------------------------------------------------------------------------------


def history_config(
    initial: str = "p", shallow_target: str | None = None, deep_target: str | None = None
) -> dict[str, Any]:
    shallow: dict[str, Any] = {"type": "history"}
    deep: dict[str, Any] = {"type": "history", "history": "deep"}
    if shallow_target:
        shallow["target"] = shallow_target
    if deep_target:
        deep["target"] = deep_target
    return {
        "id": "m",
        "initial": initial,
        "states": {
            "p": {
                "initial": "a",
                "on": {"OUT": "out"},
                "states": {
                    "a": {"on": {"N": "b"}},
                    "b": {"initial": "b1", "states": {"b1": {"on": {"N": "b2"}}, "b2": {}}},
                    "hs": shallow,
                    "hd": deep,
                },
            },
            "out": {"on": {"SHALLOW": "p.hs", "DEEP": "p.hd", "PLAIN": "p"}},
        },
    }


PAR_HISTORY = {
    "id": "m",
    "initial": "P",
    "states": {
        "P": {
            "type": "parallel",
            "on": {"OUT": "out"},
            "states": {
                "r1": {"initial": "a1", "states": {"a1": {"on": {"N": "a2"}}, "a2": {}}},
                "r2": {
                    "initial": "b1",
                    "states": {
                        "b1": {"on": {"N": "b2"}},
                        "b2": {"initial": "x", "states": {"x": {"on": {"M": "y"}}, "y": {}}},
                    },
                },
                "hs": {"type": "history"},
                "hd": {"type": "history", "history": "deep"},
            },
        },
        "out": {"on": {"SHALLOW": "P.hs", "DEEP": "P.hd"}},
    },
}

HISTORY = [
    Case(
        "shallow-remembers-child-not-grandchild",
        history_config(),
        ["SHALLOW"],
        {"p": {"b": "b1"}},
        ["-out", "+p", "+p.b", "+p.b.b1"],
        given=["N", "N", "OUT"],
    ),
    Case(
        "deep-remembers-leaves",
        history_config(),
        ["DEEP"],
        {"p": {"b": "b2"}},
        ["-out", "+p", "+p.b", "+p.b.b2"],
        given=["N", "N", "OUT"],
    ),
    Case(
        "plain-target-ignores-history",
        history_config(),
        ["PLAIN"],
        {"p": "a"},
        ["-out", "+p", "+p.a"],
        given=["N", "N", "OUT"],
    ),
    Case(
        "shallow-without-record-uses-parent-initial",
        history_config("out"),
        ["SHALLOW"],
        {"p": "a"},
        ["-out", "+p", "+p.a"],
    ),
    Case(
        "deep-without-record-uses-parent-initial",
        history_config("out"),
        ["DEEP"],
        {"p": "a"},
        ["-out", "+p", "+p.a"],
    ),
    Case(
        "shallow-default-target",
        history_config("out", shallow_target="b"),
        ["SHALLOW"],
        {"p": {"b": "b1"}},
        ["-out", "+p", "+p.b", "+p.b.b1"],
    ),
    Case(
        "deep-default-target",
        history_config("out", deep_target="b.b2"),
        ["DEEP"],
        {"p": {"b": "b2"}},
        ["-out", "+p", "+p.b", "+p.b.b2"],
    ),
    Case(
        "default-ignored-once-recorded",
        history_config(shallow_target="b"),
        ["SHALLOW"],
        {"p": "a"},
        given=["OUT"],
    ),
    Case(
        "history-updated-on-every-exit",
        history_config(),
        ["SHALLOW"],
        {"p": "a"},
        given=["N", "OUT", "SHALLOW", "OUT", "PLAIN", "OUT"],
    ),
    Case(
        "deep-history-of-parallel-remembers-every-region",
        PAR_HISTORY,
        ["DEEP"],
        {"P": {"r1": "a2", "r2": {"b2": "y"}}},
        given=["N", "M", "OUT"],
    ),
    Case(
        "shallow-history-of-parallel-reenters-region-initials",
        PAR_HISTORY,
        ["SHALLOW"],
        {"P": {"r1": "a1", "r2": "b1"}},
        given=["N", "M", "OUT"],
    ),
]


@table(HISTORY)
def test_history(case: Case, mode: str) -> None:
    _check(case, mode)


# -- eventless (always) transitions ---------------------------------------------------------------


def count_below(limit: int) -> Any:
    return lambda c, e: c["n"] < limit


ALWAYS = [
    Case(
        "transient-chain-in-one-macrostep",
        {
            "id": "m",
            "initial": "a",
            "context": {"n": 5},
            "states": {
                "a": {"on": {"E": "b"}},
                "b": {"always": "c"},
                "c": {"always": [{"guard": "big", "target": "d"}, {"target": "e"}]},
                "d": {},
                "e": {},
            },
        },
        ["E"],
        "e",
        ["-a", "+b", "-b", "+c", "-c", "+e"],
        guards={"big": count_below(0)},
    ),
    Case(
        "taken-on-start",
        {"id": "m", "initial": "a", "states": {"a": {"always": "b"}, "b": {}}},
        [],
        "b",
        ["+(root)", "+a", "-a", "+b"],
        given=None,
    ),
    Case(
        "checked-when-the-event-matched-nothing-and-sees-that-event",
        {
            "id": "m",
            "initial": "a",
            "states": {"a": {"always": {"guard": "is_poke", "target": "b"}}, "b": {}},
        },
        ["POKE"],
        "b",
        ["-a", "+b"],
        guards={"is_poke": lambda c, e: e["type"] == "POKE"},
    ),
    Case(
        "not-taken-while-guard-fails",
        {
            "id": "m",
            "initial": "a",
            "states": {"a": {"always": {"guard": "is_poke", "target": "b"}}, "b": {}},
        },
        ["OTHER"],
        "a",
        [],
        guards={"is_poke": lambda c, e: e["type"] == "POKE"},
    ),
    Case(
        "targetless-assign-loops-until-guard-fails",
        {
            "id": "m",
            "initial": "a",
            "context": {"n": 0},
            "states": {
                "a": {
                    "always": {
                        "guard": "below_3",
                        "actions": [assign({"n": lambda c, e: c["n"] + 1}), "t"],
                    }
                }
            },
        },
        [],
        "a",
        ["+(root)", "+a", "t", "t", "t"],
        given=None,
        context={"n": 3},
        guards={"below_3": count_below(3)},
    ),
    Case(
        "follows-another-regions-move",
        {
            "id": "m",
            "type": "parallel",
            "states": {
                "r1": {"initial": "a1", "states": {"a1": {"on": {"E": "a2"}}, "a2": {}}},
                "r2": {
                    "initial": "b1",
                    "states": {
                        "b1": {"always": {"guard": state_in("#m.r1.a2"), "target": "b2"}},
                        "b2": {},
                    },
                },
            },
        },
        ["E"],
        {"r1": "a2", "r2": "b2"},
        ["-r1.a1", "+r1.a2", "-r2.b1", "+r2.b2"],
    ),
    Case(
        "ancestor-always-applies-to-descendants",
        {
            "id": "m",
            "initial": "p",
            "context": {"n": 0},
            "states": {
                "p": {
                    "initial": "a",
                    "always": {"guard": "positive", "target": "q"},
                    "states": {"a": {"on": {"INC": {"actions": assign({"n": 1})}}}},
                },
                "q": {},
            },
        },
        ["INC"],
        "q",
        ["-p.a", "-p", "+q"],
        guards={"positive": lambda c, e: c["n"] > 0},
    ),
    Case(
        "shared-ancestor-always-taken-once-for-all-regions",
        {
            "id": "m",
            "initial": "P",
            "context": {"n": 0},
            "states": {
                "P": {
                    "type": "parallel",
                    "always": {"guard": "zero", "actions": [assign({"n": 1}), "t"]},
                    "states": {
                        "r1": {"initial": "a", "states": {"a": {}}},
                        "r2": {"initial": "b", "states": {"b": {}}},
                    },
                }
            },
        },
        [],
        {"P": {"r1": "a", "r2": "b"}},
        ["+(root)", "+P", "+P.r1", "+P.r1.a", "+P.r2", "+P.r2.b", "t"],
        given=None,
        context={"n": 1},
        guards={"zero": lambda c, e: c["n"] == 0},
    ),
    Case(
        "eventless-before-internal-queue",
        {
            "id": "m",
            "initial": "a",
            "states": {
                "a": {"on": {"E": {"target": "b", "actions": [raise_("I")]}}},
                "b": {"always": "c", "on": {"I": "wrong"}},
                "c": {"on": {"I": "d"}},
                "d": {},
                "wrong": {},
            },
        },
        ["E"],
        "d",
        ["-a", "+b", "-b", "+c", "-c", "+d"],
    ),
]


@table(ALWAYS)
def test_always(case: Case, mode: str) -> None:
    _check(case, mode)


# -- final states and done events -----------------------------------------------------------------


def done_output(context: Any, event: Any) -> Any:
    return {"done_event": event["type"], "from_final": event.get("output"), "n": context["n"]}


DONE = [
    Case(
        "compound-final-raises-done-state-event-with-output",
        {
            "id": "m",
            "initial": "p",
            "context": {"n": 7},
            "states": {
                "p": {
                    "initial": "a",
                    "onDone": {"target": "next", "actions": [assign({"got": lambda c, e: e})]},
                    "states": {
                        "a": {"on": {"F": "fin"}},
                        "fin": {
                            "type": "final",
                            "output": lambda c, e: {"n": c["n"], "by": e["type"]},
                        },
                    },
                },
                "next": {},
            },
        },
        ["F"],
        "next",
        ["-p.a", "+p.fin", "-p.fin", "-p", "+next"],
        context={"n": 7, "got": {"type": "xstate.done.state.m.p", "output": {"n": 7, "by": "F"}}},
    ),
    Case(
        "parallel-done-when-every-region-is-final",
        {
            "id": "m",
            "initial": "P",
            "states": {
                "P": {
                    "type": "parallel",
                    "onDone": {"target": "after", "actions": ["p_done"]},
                    "states": {
                        "r1": {
                            "initial": "a",
                            "onDone": {"actions": ["r1_done"]},
                            "states": {"a": {"on": {"A": "af"}}, "af": {"type": "final"}},
                        },
                        "r2": {
                            "initial": "b",
                            "onDone": {"actions": ["r2_done"]},
                            "states": {"b": {"on": {"B": "bf"}}, "bf": {"type": "final"}},
                        },
                    },
                },
                "after": {},
            },
        },
        ["A", "B"],
        "after",
        [
            "-P.r1.a",
            "+P.r1.af",
            "r1_done",
            "-P.r2.b",
            "+P.r2.bf",
            "r2_done",
            "-P.r2.bf",
            "-P.r2",
            "-P.r1.af",
            "-P.r1",
            "-P",
            "p_done",
            "+after",
        ],
    ),
    Case(
        "one-final-region-does-not-finish-the-parallel",
        {
            "id": "m",
            "initial": "P",
            "states": {
                "P": {
                    "type": "parallel",
                    "onDone": "after",
                    "states": {
                        "r1": {
                            "initial": "a",
                            "states": {"a": {"on": {"A": "af"}}, "af": {"type": "final"}},
                        },
                        "r2": {
                            "initial": "b",
                            "states": {"b": {"on": {"B": "bf"}}, "bf": {"type": "final"}},
                        },
                    },
                },
                "after": {},
            },
        },
        ["A"],
        {"P": {"r1": "af", "r2": "b"}},
    ),
    Case(
        "top-level-final-gives-done-status-and-machine-output",
        {
            "id": "m",
            "initial": "a",
            "context": {"n": 3},
            "output": done_output,
            "states": {"a": {"on": {"F": "fin"}}, "fin": {"type": "final", "output": {"v": 2}}},
        },
        ["F"],
        "fin",
        ["-a", "+fin", "-fin", "-(root)"],
        status="done",
        output={"done_event": "xstate.done.state.m.fin", "from_final": {"v": 2}, "n": 3},
    ),
    Case(
        "static-machine-output",
        {
            "id": "m",
            "initial": "a",
            "output": {"ok": True},
            "states": {"a": {"on": {"F": "fin"}}, "fin": {"type": "final"}},
        },
        ["F"],
        "fin",
        status="done",
        output={"ok": True},
    ),
    Case(
        "done-without-output-has-none",
        {
            "id": "m",
            "initial": "a",
            "states": {"a": {"on": {"F": "fin"}}, "fin": {"type": "final"}},
        },
        ["F"],
        "fin",
        status="done",
        output=None,
    ),
    Case(
        "events-to-a-done-machine-are-ignored",
        {
            "id": "m",
            "initial": "a",
            "context": {"n": 0},
            "states": {"a": {"on": {"F": "fin"}}, "fin": {"type": "final"}},
            "on": {"INC": {"actions": [assign({"n": 1}), "t"]}},
        },
        ["F", "INC"],
        "fin",
        ["-a", "+fin", "-fin", "-(root)"],
        context={"n": 0},
        status="done",
        modes=("pure",),
    ),  # a done actor has stopped: see test_actor_rules
    Case(
        "nested-final-in-a-region-completes-up-the-tree",
        {
            "id": "m",
            "initial": "P",
            "states": {
                "P": {
                    "type": "parallel",
                    "onDone": "end",
                    "states": {
                        "r1": {
                            "initial": "inner",
                            "states": {
                                "inner": {
                                    "initial": "x",
                                    "onDone": "r1f",
                                    "states": {"x": {"on": {"A": "xf"}}, "xf": {"type": "final"}},
                                },
                                "r1f": {"type": "final"},
                            },
                        },
                        "r2": {"initial": "b", "states": {"b": {"type": "final"}}},
                    },
                },
                "end": {"type": "final"},
            },
        },
        ["A"],
        "end",
        status="done",
    ),
]


@table(DONE)
def test_done(case: Case, mode: str) -> None:
    _check(case, mode)


# -- raise_ and the internal queue ----------------------------------------------------------------

RAISE = [
    Case(
        "raised-event-waits-for-the-current-actions",
        {
            "id": "m",
            "initial": "a",
            "states": {
                "a": {
                    "on": {
                        "E": {"actions": [raise_("I"), "after_raise"]},
                        "I": {"target": "b", "actions": ["on_i"]},
                    }
                },
                "b": {},
            },
        },
        ["E"],
        "b",
        ["after_raise", "-a", "on_i", "+b"],
    ),
    Case(
        "raised-events-are-fifo",
        {
            "id": "m",
            "initial": "a",
            "states": {
                "a": {"on": {"E": {"actions": [raise_("X"), raise_("Y")]}, "X": "b", "Y": "wrong"}},
                "b": {"on": {"Y": "c"}},
                "c": {},
                "wrong": {},
            },
        },
        ["E"],
        "c",
        ["-a", "+b", "-b", "+c"],
    ),
    Case(
        "raised-event-payload-reaches-guards",
        {
            "id": "m",
            "initial": "a",
            "states": {
                "a": {
                    "on": {
                        "E": {"actions": [raise_({"type": "I", "n": 5})]},
                        "I": [{"guard": "n_is_5", "target": "five"}, {"target": "other"}],
                    }
                },
                "five": {},
                "other": {},
            },
        },
        ["E"],
        "five",
        guards={"n_is_5": lambda c, e: e["n"] == 5},
    ),
    Case(
        "raise-from-initial-entry",
        {
            "id": "m",
            "initial": "a",
            "states": {"a": {"entry": [raise_("GO")], "on": {"GO": "b"}}, "b": {}},
        },
        [],
        "b",
        ["+(root)", "+a", "-a", "+b"],
        given=None,
    ),
    Case(
        "raise-in-exit-is-handled-in-the-new-state",
        {
            "id": "m",
            "initial": "a",
            "states": {
                "a": {"exit": [raise_("I")], "on": {"E": "b", "I": "wrong"}},
                "b": {"on": {"I": "c"}},
                "c": {},
                "wrong": {},
            },
        },
        ["E"],
        "c",
        ["-a", "+b", "-b", "+c"],
    ),
]


@table(RAISE)
def test_raise(case: Case, mode: str) -> None:
    _check(case, mode)


# -- event descriptors: exact, prefix.*, * -------------------------------------------------------

WILD = {
    "id": "m",
    "initial": "s",
    "states": {
        "s": {
            "on": {
                "*": "any",
                "mouse.*": "mouse",
                "mouse.click.*": "click",
                "E": "exact",
                "G": {"guard": "no", "target": "exact"},
            }
        },
        "any": {},
        "mouse": {},
        "click": {},
        "exact": {},
    },
}

NESTED_WILD = {
    "id": "m",
    "initial": "p",
    "on": {"*": ".caught"},
    "states": {"p": {"initial": "c", "states": {"c": {"on": {"E": "d"}}, "d": {}}}, "caught": {}},
}

WILDCARDS = [
    Case("exact-beats-wildcards-whatever-the-order", WILD, ["E"], "exact"),
    Case("star-catches-anything", WILD, ["SOMETHING"], "any"),
    Case("longest-prefix-first", WILD, ["mouse.click.left"], "click"),
    Case("prefix-matches-deeper-events", WILD, ["mouse.move.fast"], "mouse"),
    Case("prefix-matches-its-own-stem", WILD, ["mouse"], "mouse"),
    Case("prefix-matches-whole-tokens-only", WILD, ["mousetrap"], "any"),
    # engine divergence from XState (docs/semantics.md): a failed exact guard falls through
    Case("failed-exact-guard-falls-through-to-wildcards", WILD, ["G"], "any"),
    Case("child-exact-before-parent-wildcard", NESTED_WILD, ["E"], {"p": "d"}),
    Case("parent-wildcard-when-child-has-no-match", NESTED_WILD, ["Z"], "caught"),
]


@table(WILDCARDS)
def test_wildcards(case: Case, mode: str) -> None:
    case.guards = {"no": no}
    _check(case, mode)


# -- guards -----------------------------------------------------------------------------------

GUARD_IMPLS = {
    "yes": yes,
    "no": no,
    "above": lambda c, e, limit: c["n"] > limit,
    "amount_ok": lambda c, e: e.get("amount", 0) >= 10,
}


def guarded(guard: Any) -> dict[str, Any]:
    return {
        "id": "m",
        "initial": "P",
        "context": {"n": 5},
        "states": {
            "P": {
                "type": "parallel",
                "states": {
                    "r1": {"initial": "a", "states": {"a": {"on": {"MOVE": "b"}}, "b": {}}},
                    "r2": {
                        "initial": "x",
                        "states": {"x": {"on": {"E": {"guard": guard, "target": "y"}}}, "y": {}},
                    },
                },
            }
        },
    }


def moved(
    case_name: str,
    guard: Any,
    passes: bool,
    events: list[Any] | None = None,
    given: list[Any] | None = None,
) -> Case:
    r1 = "b" if given else "a"
    return Case(
        case_name,
        guarded(guard),
        events or ["E"],
        {"P": {"r1": r1, "r2": "y" if passes else "x"}},
        given=given or [],
    )


GUARDS = [
    moved("named-passes", "yes", True),
    moved("named-fails", "no", False),
    moved("parameterized-passes", {"type": "above", "params": {"limit": 4}}, True),
    moved("parameterized-fails", {"type": "above", "params": {"limit": 5}}, False),
    moved("inline-callable", lambda c, e: c["n"] == 5, True),
    moved("and-all-pass", and_("yes", {"type": "above", "params": {"limit": 1}}), True),
    moved("and-one-fails", and_(["yes", "no"]), False),
    moved("or-one-passes", or_("no", "yes"), True),
    moved("or-none-passes", or_("no", "no"), False),
    moved("not-negates", not_("no"), True),
    moved("nested-combinators", and_(not_("no"), or_("no", lambda c, e: True)), True),
    moved("state-in-by-id-fails", state_in("#m.P.r1.b"), False),
    moved("state-in-by-id-passes", state_in("#m.P.r1.b"), True, given=["MOVE"]),
    moved("state-in-by-path", state_in("P.r1.b"), True, given=["MOVE"]),
    moved("event-payload-passes", "amount_ok", True, events=[{"type": "E", "amount": 12}]),
    moved("event-payload-fails", "amount_ok", False, events=[{"type": "E", "amount": 2}]),
    Case(
        "guard-sees-context-before-own-assign",
        {
            "id": "m",
            "initial": "a",
            "context": {"n": 0},
            "states": {
                "a": {
                    "on": {
                        "E": [
                            {"guard": "zero", "target": "b", "actions": [assign({"n": 99})]},
                            {"target": "c"},
                        ]
                    }
                },
                "b": {"on": {"E": [{"guard": "zero", "target": "c"}, {"target": "d"}]}},
                "c": {},
                "d": {},
            },
        },
        ["E", "E"],
        "d",
        context={"n": 99},
        guards={"zero": lambda c, e: c["n"] == 0},
    ),
]


@table(GUARDS)
def test_guards(case: Case, mode: str) -> None:
    case.guards = {**GUARD_IMPLS, **case.guards}
    _check(case, mode)


# -- starting: what the initial transition does -------------------------------------------------

START = [
    Case(
        "initial-final-child-raises-done-at-start",
        {
            "id": "m",
            "initial": "p",
            "states": {
                "p": {
                    "initial": "f",
                    "onDone": {"target": "q", "actions": ["p_done"]},
                    "states": {"f": {"type": "final"}},
                },
                "q": {},
            },
        },
        [],
        "q",
        ["+(root)", "+p", "+p.f", "-p.f", "-p", "p_done", "+q"],
        given=None,
    ),
    Case(
        "initial-top-level-final-is-done-at-start",
        {"id": "m", "initial": "f", "output": {"at": "start"}, "states": {"f": {"type": "final"}}},
        [],
        "f",
        ["+(root)", "+f", "-f", "-(root)"],
        given=None,
        status="done",
        output={"at": "start"},
    ),
    Case(
        "parallel-root-done-when-every-region-is-final",
        {
            "id": "m",
            "type": "parallel",
            "output": lambda c, e: e["type"],
            "states": {
                "r1": {"initial": "a", "states": {"a": {"on": {"A": "f"}}, "f": {"type": "final"}}},
                "r2": {"initial": "g", "states": {"g": {"type": "final"}}},
            },
        },
        ["A"],
        {"r1": "f", "r2": "g"},
        status="done",
        output="xstate.done.state.m",
    ),
    Case(
        "history-as-initial-child-uses-default-then-memory",
        {
            "id": "m",
            "initial": "p",
            "states": {
                "p": {
                    "initial": "h",
                    "on": {"OUT": "out"},
                    "states": {
                        "h": {"type": "history", "target": "b"},
                        "a": {},
                        "b": {"on": {"NEXT": "a"}},
                    },
                },
                "out": {"on": {"BACK": "p"}},
            },
        },
        ["NEXT", "OUT", "BACK"],
        {"p": "a"},
        ["-p.b", "+p.a", "-p.a", "-p", "+out", "-out", "+p", "+p.a"],
        given=[],
    ),
    Case(
        "deep-initial-chain-enters-outside-in",
        {
            "id": "m",
            "initial": "a",
            "states": {
                "a": {
                    "initial": "b",
                    "states": {
                        "b": {
                            "type": "parallel",
                            "states": {
                                "x": {"initial": "x1", "states": {"x1": {}}},
                                "y": {
                                    "initial": "y1",
                                    "states": {"y1": {"initial": "z", "states": {"z": {}}}},
                                },
                            },
                        }
                    },
                }
            },
        },
        [],
        {"a": {"b": {"x": "x1", "y": {"y1": "z"}}}},
        ["+(root)", "+a", "+a.b", "+a.b.x", "+a.b.x.x1", "+a.b.y", "+a.b.y.y1", "+a.b.y.y1.z"],
        given=None,
    ),
]


@table(START)
def test_start(case: Case, mode: str) -> None:
    _check(case, mode)
