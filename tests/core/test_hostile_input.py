"""Hostile and unusual input gets the documented error naming where it is, never a hang, a
RecursionError, an AssertionError or a TypeError from inside the engine (issue 25).

``pytest.mark.timeout`` bounds each case: a regression shows up as a failure, not a hung run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statecharts import MachineDefinitionError, SnapshotError, create_machine
from statecharts.io.scxml import load_scxml
from statecharts.io.scxml.errors import ExpressionRefused, ScxmlError
from statecharts.io.scxml.evaluator import MAX_SIZE, RestrictedEvaluator
from statecharts.limits import MAX_NESTING, MAX_STATE_DEPTH
from statecharts.loading import load_machine, read_yaml

pytestmark = pytest.mark.timeout(60)
SCXML = '<scxml xmlns="http://www.w3.org/2005/07/scxml">{}</scxml>'


def _nested_scxml(tag: str, depth: int) -> str:
    if tag == "state":
        return SCXML.format(
            "".join(f'<state id="s{i}">' for i in range(depth)) + "</state>" * depth
        )
    if tag == "if":
        return SCXML.format(
            '<state id="s"><onentry>'
            + '<if cond="True">' * depth
            + "</if>" * depth
            + "</onentry></state>"
        )
    return SCXML.format(
        '<datamodel><data id="d">'
        + "<x>" * depth
        + "</x>" * depth
        + '</data></datamodel><state id="s"/>'
    )


def test_scxml_billion_laughs_is_refused_at_once() -> None:
    entities = '<!ENTITY a "aaaaaaaaaa">' + "".join(
        f'<!ENTITY {chr(98 + i)} "{("&" + chr(97 + i) + ";") * 10}">' for i in range(6)
    )
    document = f'<?xml version="1.0"?><!DOCTYPE scxml [{entities}]>' + SCXML.format(
        '<state id="s"><onentry><log label="&g;" expr="1"/></onentry></state>'
    )
    with pytest.raises(ScxmlError, match=r"<scxml>:1: the document declares the entity 'a'"):
        load_scxml(document)


def test_scxml_external_entity_is_refused() -> None:
    document = (
        '<?xml version="1.0"?><!DOCTYPE scxml [<!ENTITY e SYSTEM '
        '"file:///etc/passwd">]>'
        + SCXML.format('<state id="s"><onentry><log label="&e;"/></onentry></state>')
    )
    with pytest.raises(ScxmlError, match="declares the entity 'e'"):
        load_scxml(document)


def test_scxml_long_text_in_many_chunks_loads() -> None:
    # expat hands text over in small chunks around each entity reference; joining them
    # once keeps this linear (it was quadratic)
    document = SCXML.format(
        '<datamodel><data id="d">' + "x&amp;" * 200_000 + '</data></datamodel><state id="s"/>'
    )
    assert load_scxml(document).id == "scxml"


@pytest.mark.parametrize("tag", ["state", "if", "inline XML"])
def test_scxml_nested_a_thousand_deep_is_a_scxml_error(tag: str) -> None:
    with pytest.raises(ScxmlError, match=r"<scxml>:1: <\w+> is nested 101 deep \(scxml/"):
        load_scxml(_nested_scxml(tag, 1000))


def test_scxml_nested_just_within_the_limit_loads_and_runs() -> None:
    from statecharts import SimulatedClock, create_actor

    machine = load_scxml(_nested_scxml("state", 99))
    actor = create_actor(machine, clock=SimulatedClock()).start()
    assert len(actor.get_snapshot().active_leaves()) == 1


@pytest.mark.parametrize(
    "expression",
    [
        "str([[[0] * 1000] * 1000] * 1000)",  # a thousand refs, printed a billion times
        "len(str([[0] * 999] * 999))",  # under a million items, three million characters
        "sum([[0] * 100000] * 30, [])",
        "sum([[0] * 1000] * 999, []) + [0] * 999",
        "'a' * 999999 + 'a' * 999999",
        "('a' * 600000) + ('b' * 600000) + ('c' * 600000)",
        "repr([['x'] * 1000] * 1001)",
        "f'{[[0] * 1000] * 1001}'",
        "[[[0] * 1000] * 1000] * 1000",
    ],
)
def test_every_growth_route_is_held_to_the_size_limit(expression: str) -> None:
    with pytest.raises(ExpressionRefused, match="over the limit"):
        RestrictedEvaluator().evaluate(expression, {})


def test_values_within_the_size_limit_still_work() -> None:
    evaluator = RestrictedEvaluator()
    assert evaluator.evaluate("len('a' * 500000 + 'b' * 500000)", {}) == MAX_SIZE
    assert evaluator.evaluate("sum([[1], [2], [3]], [])", {}) == [1, 2, 3]
    assert evaluator.evaluate("str([1, [2]]) + f'{3}'", {}) == "[1, [2]]3"


def _looping_scxml(body: str) -> str:
    """A document whose datamodel holds about 900,000 items and whose first state loops."""
    return (
        '<scxml xmlns="http://www.w3.org/2005/07/scxml" datamodel="python">'
        '<datamodel><data id="x" expr="sum([[0] * 1000] * 900, [])"/><data id="y" expr="0"/>'
        '<data id="error" expr="None"/></datamodel>'
        f'<state id="a"><onentry>{body}</onentry>'
        '<transition event="error.execution" target="failed">'
        '<assign location="error" expr="_event.data"/></transition></state>'
        '<state id="failed"/></scxml>'
    )


def test_a_loop_that_copies_large_values_is_refused_with_error_execution() -> None:
    """Each expression is within the size limit, but a <foreach> repeats one per item: the
    block as a whole is held to MAX_WORK (it took hours before), and the run goes on."""
    from statecharts import SimulatedClock, create_actor

    machine = load_scxml(
        _looping_scxml(
            '<foreach array="x" item="i"><assign location="y" expr="x + [i]"/></foreach>'
        )
    )
    snapshot = create_actor(machine, clock=SimulatedClock()).start().get_snapshot()
    assert snapshot.value == "failed"
    assert "over the limit" in str(snapshot.context["error"])
    assert len(snapshot.context["x"]) == 900_000  # what the datamodel held is kept


def test_a_loop_reads_only_what_it_sets_anew() -> None:
    """Setting the loop variable re-reads that one variable, not the whole datamodel (every
    item cost a copy of all 900,000 items before, so 200 items took minutes)."""
    from statecharts import SimulatedClock, create_actor

    machine = load_scxml(
        _looping_scxml(
            '<foreach array="x[:2000]" item="i" index="n"><assign location="y" expr="y + len(x)"/>'
            "</foreach>"
        )
    )
    snapshot = create_actor(machine, clock=SimulatedClock()).start().get_snapshot()
    assert snapshot.value == "a"
    assert (snapshot.context["y"], snapshot.context["n"]) == (2000 * 900_000, 1999)


def _nested_states(depth: int) -> dict[str, Any]:
    config: dict[str, Any] = {"initial": "s", "states": {"s": {}}}
    for _ in range(depth):
        config = {"initial": "s", "states": {"s": config}}
    return config


def test_states_nested_two_thousand_deep_are_a_definition_error_naming_the_path() -> None:
    with pytest.raises(
        MachineDefinitionError,
        match=rf"states\.s\.states\.s.* \.\.\. .*"
        rf"states\.s: the config nests deeper than {MAX_NESTING}",
    ):
        create_machine(_nested_states(2000))


def test_states_nested_past_the_state_limit_are_a_definition_error() -> None:
    with pytest.raises(MachineDefinitionError, match=rf"states nest at most {MAX_STATE_DEPTH}"):
        create_machine(_nested_states(MAX_STATE_DEPTH + 5))


def test_guards_nested_three_thousand_deep_are_a_definition_error() -> None:
    guard: dict[str, Any] = {"type": "ok"}
    for _ in range(3000):
        guard = {"type": "and", "guards": [guard]}
    with pytest.raises(MachineDefinitionError, match=r"states\.a\.on\.E\.guard\.guards\[0\]"):
        create_machine({"initial": "a", "states": {"a": {"on": {"E": {"guard": guard}}}}})


@pytest.mark.parametrize("kind", ["history", "final"])
def test_root_of_a_kind_it_cannot_be_is_a_definition_error(kind: str) -> None:
    with pytest.raises(
        MachineDefinitionError, match=f"type: the root is a compound or parallel state, not {kind}"
    ):
        create_machine({"type": kind})


@pytest.mark.parametrize(
    ("config", "path"),
    [
        ({"initial": "a", "states": {"a": {"type": "final"}}, "output": 2**70}, "output"),
        (
            {"initial": "a", "states": {"a": {"type": "final", "output": {"n": [2**64]}}}},
            r"states\.a\.output",
        ),
        (
            {"initial": "a", "states": {"a": {"entry": {"type": "x", "params": {"n": -(2**65)}}}}},
            r"states\.a\.entry\[0\]\.params",
        ),
    ],
)
def test_integers_beyond_64_bits_in_a_config_are_a_definition_error(config: Any, path: str) -> None:
    with pytest.raises(
        MachineDefinitionError,
        match=rf"{path}: context '{path}.*integer "
        r"-?\d+ is outside the signed 64-bit range",
    ):
        create_machine(config, actions={"x": lambda c, e, **p: None})


def _persisted() -> tuple[Any, dict[str, Any]]:
    machine = create_machine({"initial": "a", "states": {"a": {}}})
    return machine, dict(machine.persist(machine.initial_transition()[0]))


def test_restore_with_an_integer_beyond_64_bits_in_value_is_a_snapshot_error() -> None:
    machine, data = _persisted()
    with pytest.raises(SnapshotError, match=r"field 'value': not a JSON value that persists"):
        machine.restore({**data, "value": {"a": 2**70}})


@pytest.mark.parametrize("field", ["value", "context", "error"])
def test_restore_of_a_value_nested_five_thousand_deep_is_a_snapshot_error(field: str) -> None:
    machine, data = _persisted()
    value: Any = 1
    for _ in range(5000):
        value = [value]
    if field == "context":
        value = {"x": value}
    with pytest.raises(SnapshotError, match=rf"field '{field}(\.x)?\[0\]\[0\]"):
        machine.restore({**data, field: value})


def test_yaml_machine_keeps_on_off_yes_no_as_strings(tmp_path: Path) -> None:
    file = tmp_path / "switch.yaml"
    file.write_text(
        "id: switch\ninitial: off\nstates:\n  off:\n    on:\n      yes: on\n"
        "  on:\n    on:\n      no: off\n"
    )
    machine = load_machine(file)
    snapshot = machine.transition(machine.initial_transition()[0], "yes")[0]
    assert snapshot.value == "on"
    assert machine.transition(snapshot, "no")[0].value == "off"


def test_yaml_true_and_false_are_still_booleans() -> None:
    assert read_yaml("a: true\nb: False\nc: On\nd: NO\n") == {
        "a": True,
        "b": False,
        "c": "On",
        "d": "NO",
    }


def test_yaml_key_given_twice_is_an_error_naming_the_line() -> None:
    with pytest.raises(MachineDefinitionError, match=r"(?s)the key 'a' is given twice.*line 3"):
        read_yaml("states:\n  a: {}\n  a: {}\n", "m.yaml")


def test_yaml_alias_bomb_is_refused() -> None:
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 8)]
    with pytest.raises(MachineDefinitionError, match=r"m\.yaml:\d+: aliases expand this YAML"):
        read_yaml("\n".join(lines), "m.yaml")


def test_yaml_nested_too_deeply_is_a_definition_error() -> None:
    with pytest.raises(MachineDefinitionError, match=r"m\.yaml: the YAML nests too deeply"):
        read_yaml("[" * 5000 + "]" * 5000, "m.yaml")


def test_yaml_python_tags_are_refused() -> None:
    with pytest.raises(MachineDefinitionError, match="could not determine a constructor"):
        read_yaml("!!python/object/apply:os.system ['true']", "m.yaml")


@pytest.mark.parametrize("delay", [2**70, 1e300])
def test_a_delay_too_long_to_persist_is_an_implementation_error(delay: Any) -> None:
    from statecharts import ImplementationError

    machine = create_machine(
        {"initial": "a", "states": {"a": {"after": {"d": "a"}}}}, delays={"d": lambda c, e: delay}
    )
    with pytest.raises(ImplementationError, match=r"delay 'd'.*at most 9007199254740991 ms"):
        machine.initial_transition()


def test_scxml_send_with_a_delay_too_long_to_persist_still_persists() -> None:
    from statecharts import SimulatedClock, create_actor

    machine = load_scxml(
        SCXML.format(
            '<state id="s"><onentry><send event="E" '
            'delay="99999999999999999999s"/></onentry></state>'
        )
    )
    actor = create_actor(machine, clock=SimulatedClock()).start()
    assert actor.get_persisted_snapshot()["timers"] == []


def test_a_literal_after_delay_too_long_to_persist_is_a_definition_error() -> None:
    with pytest.raises(
        MachineDefinitionError,
        match=r"states\.a\.after\.1e20: a delay is at "
        r"most 9007199254740991 ms",
    ):
        create_machine({"initial": "a", "states": {"a": {"after": {"1e20": "a"}}}})
