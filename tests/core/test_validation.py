"""Validation at creation: every problem, with its config path, in one MachineDefinitionError."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from statecharts import MachineDefinitionError, create_machine, load_machine


def _ok(context: Any, event: Any) -> bool:
    return True


def _noop(context: Any, event: Any) -> None:
    return None


def machine_with(states: dict[str, Any], initial: str = "a", **root: Any) -> dict[str, Any]:
    return {"id": "m", "initial": initial, "states": states, **root}


PROBLEMS: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    (
        "issue-example-target-did-you-mean",
        machine_with({"payment": {"on": {"PAY": "paid"}}, "payed": {}}, "payment"),
        {},
        "states.payment.on.PAY[0].target: no state 'paid' (did you mean 'payed'?)",
    ),
    (
        "unknown-root-key",
        {**machine_with({"a": {}}), "intial": "a"},
        {},
        "intial: unknown key 'intial' (did you mean 'initial'?)",
    ),
    (
        "unknown-state-key",
        machine_with({"a": {"entyr": "x"}}),
        {},
        "states.a.entyr: unknown key 'entyr' (did you mean 'entry'?)",
    ),
    (
        "unknown-transition-key",
        machine_with({"a": {"on": {"E": {"tagret": "a"}}}}),
        {},
        "states.a.on.E[0].tagret: unknown key 'tagret' (did you mean 'target'?)",
    ),
    (
        "v4-cond-key",
        machine_with({"a": {"on": {"E": {"cond": "x", "target": "a"}}}}),
        {},
        "states.a.on.E[0].cond: 'cond' was renamed 'guard' in XState v5",
    ),
    (
        "unknown-id-target",
        machine_with({"a": {"id": "alpha", "on": {"E": "#alhpa"}}}),
        {},
        "states.a.on.E[0].target: no state with id 'alhpa' (did you mean 'alpha'?)",
    ),
    (
        "unknown-nested-target",
        machine_with({"a": {"on": {"E": "b.x"}}, "b": {"initial": "y", "states": {"y": {}}}}),
        {},
        "states.a.on.E[0].target: no state 'x' in 'm.b'",
    ),
    (
        "second-of-several-targets",
        machine_with({"a": {"on": {"E": {"target": ["a", "bb"]}}}, "b": {}}),
        {},
        "states.a.on.E[0].target[1]: no state 'bb' (did you mean 'b'?)",
    ),
    (
        "root-target-needs-a-dot",
        {**machine_with({"a": {}}), "on": {"E": "a"}},
        {},
        "on.E[0].target: 'a' is not a target from the root; did you mean '.a'?",
    ),
    (
        "compound-without-initial",
        machine_with({"p": {"states": {"a": {}, "b": {}}}}, "p"),
        {},
        "states.p.initial: a compound state needs 'initial' (one of a, b)",
    ),
    (
        "initial-names-missing-child",
        machine_with({"p": {"initial": "c", "states": {"a": {}, "cc": {}}}}, "p"),
        {},
        "states.p.initial: no child state 'c' (did you mean 'cc'?)",
    ),
    (
        "root-initial-names-missing-child",
        machine_with({"idle": {}}, "idel"),
        {},
        "initial: no child state 'idel' (did you mean 'idle'?)",
    ),
    (
        "unknown-guard",
        machine_with({"a": {"on": {"E": {"guard": "isOk", "target": "a"}}}}),
        {"guards": {"isOK": _ok}},
        "states.a.on.E[0].guard: no guard 'isOk' (did you mean 'isOK'?)",
    ),
    (
        "unknown-parameterized-guard",
        machine_with({"a": {"on": {"E": {"guard": {"type": "nope", "params": {}}}}}}),
        {},
        "states.a.on.E[0].guard: no guard 'nope'",
    ),
    (
        "unknown-action",
        machine_with({"a": {"entry": ["lgo"]}}),
        {"actions": {"log": _noop}},
        "states.a.entry[0]: no action 'lgo' (did you mean 'log'?)",
    ),
    (
        "unknown-parameterized-exit-action",
        machine_with({"a": {"exit": {"type": "x"}}}),
        {},
        "states.a.exit[0]: no action 'x'",
    ),
    (
        "unknown-transition-action",
        machine_with({"a": {"on": {"E": {"actions": ["a", "go"]}}}}),
        {"actions": {"a": _noop}},
        "states.a.on.E[0].actions[1]: no action 'go'",
    ),
    (
        "unknown-actor",
        machine_with({"a": {"invoke": {"src": "fetch"}}}),
        {"actors": {"fetchit": lambda i: 1}},
        "states.a.invoke.src: no actor 'fetch' (did you mean 'fetchit'?)",
    ),
    (
        "unknown-delay",
        machine_with({"a": {"after": {"slow": "a"}}}),
        {},
        "states.a.after.slow: no delay 'slow' (a delay is milliseconds or a name from delays=)",
    ),
    (
        "negative-delay",
        machine_with({"a": {"after": {"-5": "a"}}}),
        {},
        "states.a.after.-5: a delay must be a non-negative number of ms, not '-5'",
    ),
    (
        "bad-history-type",
        machine_with(
            {
                "p": {
                    "initial": "a",
                    "states": {"a": {}, "h": {"type": "history", "history": "medium"}},
                }
            },
            "p",
        ),
        {},
        "states.p.states.h.history: history is 'shallow' or 'deep', not 'medium'",
    ),
    (
        "history-default-missing",
        machine_with(
            {"p": {"initial": "a", "states": {"a": {}, "h": {"type": "history", "target": "zz"}}}},
            "p",
        ),
        {},
        "states.p.states.h.target: no state 'zz'",
    ),
    (
        "duplicate-ids",
        machine_with({"a": {"id": "x"}, "b": {"id": "x"}}),
        {},
        "states.b.id: duplicate state id 'x'",
    ),
    (
        "unknown-state-type",
        machine_with({"a": {"type": "paralel"}}),
        {},
        "states.a.type: unknown state type 'paralel' "
        "(one of atomic, compound, parallel, final, history)",
    ),
    (
        "wildcard-not-last",
        machine_with({"a": {"on": {"a.*.b": "a"}}}),
        {},
        "states.a.on.a.*.b: a wildcard is '*' or the last token ('prefix.*')",
    ),
]


@pytest.mark.parametrize(
    ("name", "config", "impl", "problem"), PROBLEMS, ids=[row[0] for row in PROBLEMS]
)
def test_each_problem_is_reported_with_its_path(
    name: str, config: dict[str, Any], impl: dict[str, Any], problem: str
) -> None:
    with pytest.raises(MachineDefinitionError) as info:
        create_machine(config, **impl)
    assert info.value.problems == (problem,)
    assert problem in str(info.value)


def test_every_problem_is_listed_at_once() -> None:
    config = machine_with(
        {"p": {"states": {"a": {"on": {"E": "zz"}}}}, "q": {"entry": "nope"}}, "p"
    )
    with pytest.raises(MachineDefinitionError) as info:
        create_machine(config)
    assert info.value.problems == (
        "states.p.initial: a compound state needs 'initial' (one of a)",
        "states.p.states.a.on.E[0].target: no state 'zz'",
        "states.q.entry[0]: no action 'nope'",
    )
    assert str(info.value).startswith("invalid machine definition (3 problems):")


def test_non_json_initial_context_is_a_definition_problem_naming_the_key() -> None:
    with pytest.raises(MachineDefinitionError) as info:
        create_machine(machine_with({"a": {}}, context={"tags": {"x", "y"}}))
    (problem,) = info.value.problems
    assert problem.startswith("context: ")
    assert "context.tags" in problem


def test_an_xstate_json_config_loads_unchanged(tmp_path: Path) -> None:
    config = {
        "id": "light",
        "initial": "green",
        "context": {"cycles": 0},
        "states": {
            "green": {"on": {"TIMER": "yellow"}, "tags": ["go"], "description": "go ahead"},
            "yellow": {"after": {"1000": "red"}},
            "red": {
                "on": {"TIMER": {"target": "green", "actions": [{"type": "count"}]}},
                "meta": {"color": "#f00"},
            },
        },
    }
    path = tmp_path / "light.json"
    path.write_bytes(orjson.dumps(config))
    machine = load_machine(path, actions={"count": _noop})
    snapshot, _ = machine.initial_transition(now=0)
    snapshot, _ = machine.transition(snapshot, "TIMER", now=5)
    assert snapshot.value == "yellow"
    (timer,) = snapshot.timers
    assert timer.due_at == 1005
    snapshot, _ = machine.fire_timer(snapshot, timer.id, now=1005)
    assert snapshot.value == "red"
    assert machine.get_state_node("light.red").meta == {"color": "#f00"}


def test_json_loaded_state_types_behave_like_literal_ones() -> None:
    """State types read from JSON are fresh strings, not the engine's constants."""
    import orjson

    from statecharts import create_machine

    text = b'{"id":"t","initial":"a","states":{"a":{"always":"b"},"b":{"type":"final"}}}'
    snapshot, _ = create_machine(orjson.loads(text)).initial_transition()
    assert snapshot.value == "b"
    assert snapshot.status == "done"
    assert snapshot.active_leaves() == ("b",)
