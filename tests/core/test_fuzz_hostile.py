"""Fuzzing what users hand the engine: machine configs, persisted snapshots, SCXML documents and
YAML machine files (issue 25).

The only outcomes allowed are success or the documented error of each entry point —
``MachineDefinitionError`` (every problem starting with the offending path), ``SnapshotError``
(naming its field), ``ScxmlError`` (naming source and line) — and, once a machine runs, the
engine's own ``StatechartError``s. Never a ``TypeError``, ``KeyError``, ``AssertionError`` or
``RecursionError`` from inside, and never a hang: each example must finish within
``TIME_BOUND`` seconds (a bound on hangs, far above the milliseconds an example takes).

The default suite runs a small budget; ``STATECHARTS_FUZZ_EXAMPLES=2000 pytest
tests/core/test_fuzz_hostile.py`` runs a larger one.
"""

from __future__ import annotations

import copy
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from statecharts import (
    MachineDefinitionError,
    SimulatedClock,
    SnapshotError,
    StatechartError,
    create_actor,
    create_machine,
    from_callable,
)
from statecharts.io.scxml import load_scxml
from statecharts.io.scxml.errors import ScxmlError
from statecharts.limits import too_deep
from statecharts.loading import load_machine

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import event as outcome  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

EXAMPLES = int(os.environ.get("STATECHARTS_FUZZ_EXAMPLES", "60"))
TIME_BOUND = float(os.environ.get("STATECHARTS_FUZZ_TIME_BOUND", "20"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
pytestmark = pytest.mark.timeout(max(120, EXAMPLES * 2))

# a problem line: "  <path>: message", the path made of keys, [index] and <root>
PROBLEM = re.compile(r"^  (<root>|[^\s:][^:]*?): \S")
SNAPSHOT_FIELD = re.compile(r"^snapshot field '[^']+': ")
SCXML_WHERE = re.compile(r"^(<scxml>:\d+: |.*: cannot read the document \()")

# -- values -------------------------------------------------------------------------------

NAMES = st.sampled_from(
    ["a", "b", "c", "p", "h", "done", "x.y", "#m.a", ".b", "", "on", "*", "E", "xstate.init", "a.*"]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    NAMES,
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)


def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    return st.recursive(
        SCALARS,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(NAMES, inner, max_size=4)
        ),
        max_leaves=max_leaves,
    )


def nested(depth: int, leaf: Any = 1) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


DEEP = st.integers(200, 3000).map(nested)

# -- machine configs ----------------------------------------------------------------------

BASE: dict[str, Any] = {
    "id": "m",
    "initial": "a",
    "context": {"n": 0},
    "states": {
        "a": {
            "on": {"GO": "b", "PAR": "p", "E": {"target": "a", "reenter": True}},
            "after": {"100": "b"},
            "entry": ["tick"],
        },
        "b": {
            "invoke": {"id": "job", "src": "job", "onDone": "a", "onError": "c"},
            "on": {"BACK": "a"},
            "tags": ["busy"],
        },
        "c": {"type": "final", "output": {"ok": True}},
        "p": {
            "type": "parallel",
            "states": {
                "r1": {
                    "initial": "x",
                    "states": {
                        "x": {"on": {"N": "y"}},
                        "y": {},
                        "h": {"type": "history", "history": "deep"},
                    },
                },
                "r2": {
                    "initial": "x",
                    "states": {"x": {"always": {"target": "z", "guard": "never"}}, "z": {}},
                },
            },
            "on": {"OUT": "a"},
        },
    },
}
KEYS = st.sampled_from(
    [
        "id",
        "initial",
        "type",
        "history",
        "target",
        "states",
        "on",
        "always",
        "after",
        "entry",
        "exit",
        "invoke",
        "onDone",
        "output",
        "tags",
        "context",
        "guard",
        "actions",
        "reenter",
        "src",
        "input",
        "onError",
        "systemId",
        "retry",
        "params",
        "delay",
        "x",
        "E",
        "a",
        "b",
        "GO",
    ]
)
CONFIG_VALUES = st.one_of(
    json_values(),
    DEEP,
    st.sampled_from(
        [
            "history",
            "final",
            "parallel",
            "compound",
            "atomic",
            "deep",
            "#m",
            "#m.p.r1.h",
            "tick",
            "never",
            "job",
            2**64,
            -1,
            [],
            {},
        ]
    ),
)
EVENTS = st.lists(
    st.sampled_from(
        [
            "GO",
            "PAR",
            "E",
            "N",
            "OUT",
            "BACK",
            "xstate.done.actor.job",
            "xstate.after.100.m.a",
            "*",
            "unknown",
        ]
    ),
    max_size=6,
)


def implementations() -> dict[str, Any]:
    return {
        "actions": {"tick": lambda c, e, **p: None},
        "guards": {"never": lambda c, e, **p: False},
        "actors": {"job": from_callable(lambda i: 1)},
    }


def paths(value: Any) -> Iterator[tuple[Any, ...]]:
    """Every place in ``value`` down to 12 levels (iterative: values may be deep)."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]
    while stack:
        item, where = stack.pop()
        yield where
        if len(where) < 12 and isinstance(item, dict):
            stack.extend((v, (*where, k)) for k, v in item.items())
        elif len(where) < 12 and isinstance(item, list):
            stack.extend((v, (*where, i)) for i, v in enumerate(item))


def mutate(base: Any, data: Any, values: st.SearchStrategy[Any]) -> Any:
    """``base`` (JSON-like) with a few places replaced, deleted or given an extra key."""
    value = copy.deepcopy(base)
    for _ in range(data.draw(st.integers(1, 4))):
        where = data.draw(st.sampled_from(list(paths(value))))
        drawn = data.draw(values)
        if too_deep(drawn, 50) is None:  # deep ones are built fresh for each draw
            drawn = copy.deepcopy(drawn)  # never mutate a sampled constant
        if not where:
            value = drawn
            continue
        parent = value
        for key in where[:-1]:
            parent = parent[key]
        action = data.draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "delete":
            del parent[where[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[data.draw(KEYS)] = drawn
        else:
            parent[where[-1]] = drawn
        if not isinstance(value, dict | list):
            break
    return value


@contextmanager
def bounded() -> Iterator[None]:
    started = time.monotonic()
    yield
    elapsed = time.monotonic() - started
    assert elapsed < TIME_BOUND, f"one example took {elapsed:.1f} s"


def expect_definition_error(exc: MachineDefinitionError) -> None:
    lines = str(exc).splitlines()[1:]
    assert lines, str(exc)
    for line in lines:
        if line.startswith("  "):
            assert PROBLEM.match(line), f"a problem without its path: {line!r}"


def run_briefly(machine: Any, events: list[str]) -> None:
    """Run on the actor runtime and through persist/restore; only engine errors may come out."""
    try:
        actor = create_actor(machine, clock=SimulatedClock()).start()
        for event in events:
            actor.send(event)
            actor.clock.advance(150)  # type: ignore[attr-defined]
        data = orjson.loads(orjson.dumps(actor.get_persisted_snapshot()))
        create_actor(machine, clock=SimulatedClock(), snapshot=data).start()
    except StatechartError:
        pass


def check_config(config: Any, events: list[str]) -> None:
    """A machine (run briefly) or a definition error whose every problem names its path."""
    with bounded():
        try:
            machine = create_machine(config, **implementations())
        except MachineDefinitionError as exc:
            outcome("definition error")
            expect_definition_error(exc)
            return
        outcome("machine built")
        run_briefly(machine, events)


@FUZZ
@given(data=st.data())
def test_fuzzed_machine_configs_give_a_machine_or_a_definition_error_with_paths(data: Any) -> None:
    check_config(mutate(BASE, data, CONFIG_VALUES), data.draw(EVENTS))


@FUZZ
@given(
    config=st.recursive(
        st.dictionaries(KEYS, CONFIG_VALUES, max_size=4),
        lambda inner: st.dictionaries(
            KEYS, st.one_of(inner, st.dictionaries(NAMES, inner, max_size=3)), max_size=5
        ),
        max_leaves=20,
    ),
    events=EVENTS,
)
def test_random_machine_configs_give_a_machine_or_a_definition_error_with_paths(
    config: Any, events: list[str]
) -> None:
    check_config(config, events)


# -- persisted snapshots --------------------------------------------------------------------

MACHINE = create_machine(BASE, **implementations())


def _persisted_samples() -> list[dict[str, Any]]:
    actor = create_actor(MACHINE, clock=SimulatedClock()).start()
    samples = [actor.get_persisted_snapshot()]
    for event in ["PAR", "N", "OUT", "GO"]:
        actor.send(event)
        samples.append(actor.get_persisted_snapshot())
    return [orjson.loads(orjson.dumps(s)) for s in samples]


SAMPLES = _persisted_samples()
SNAPSHOT_VALUES = st.one_of(
    json_values(),
    DEEP,
    st.sampled_from(
        [
            "m.p.r1.h",
            "m.a",
            "a",
            {"p": {"r1": "x"}},
            {"a": {}},
            2**64,
            -(2**63) - 1,
            [],
            {},
            [{"id": "t", "event": {"type": "GO"}, "due_at": 1}],
            {"job": {"src": "job"}},
            {"job": {"src": "nope", "state": {"kind": "machine", "snapshot": {}}}},
        ]
    ),
)


@FUZZ
@given(data=st.data())
def test_fuzzed_persisted_snapshots_restore_or_name_the_bad_field(data: Any) -> None:
    persisted = mutate(data.draw(st.sampled_from(SAMPLES)), data, SNAPSHOT_VALUES)
    as_bytes = data.draw(st.booleans())
    with bounded():
        try:
            raw = orjson.dumps(persisted) if as_bytes else persisted
        except orjson.JSONEncodeError:
            raw = persisted  # e.g. an integer beyond 64 bits: restore gets the dict
        try:
            snapshot = MACHINE.restore(raw)
        except SnapshotError as exc:
            outcome(f"SnapshotError at {exc.field.split('.')[0].split('[')[0]}")
            assert SNAPSHOT_FIELD.match(str(exc)), str(exc)
            return
        outcome("restored")
        try:
            actor = create_actor(MACHINE, clock=SimulatedClock(), snapshot=snapshot).start()
            for event in data.draw(EVENTS):
                actor.send(event)
            actor.get_persisted_snapshot()
        except StatechartError:
            pass


# -- SCXML documents ------------------------------------------------------------------------

IDS = st.sampled_from(["s", "t", "u", "p", "f", "h", "s.x", "", "1", "s t"])
EXPRESSIONS = st.sampled_from(
    [
        "1",
        "x + 1",
        "x",
        "[0] * 10",
        "'a' * 999999 + 'b' * 999999",
        "sum([[0] * 1000] * 999, [])",
        "str([[0] * 999] * 999)",
        "__import__('os')",
        "(",
        "In('s')",
        "_event.data",
        "2 ** 99999",
        "range(10 ** 9)",
        "f'{x:>99999}'",
        "x[0]",
        "{'a': 1}",
        "None",
        "True",
    ]
)
ACTIONS = st.one_of(
    st.builds(lambda e: f'<raise event="{e}"/>', st.sampled_from(["E", "F", "error.x", "", "*"])),
    st.builds(lambda e: f'<log label="l" expr="{e}"/>', EXPRESSIONS),
    st.builds(lambda e: f'<assign location="x" expr="{e}"/>', EXPRESSIONS),
    st.builds(
        lambda e: f'<send event="E" delay="{e}"/>',
        st.sampled_from(["1s", "10ms", "-1s", "x", "", "99999999999999999999s"]),
    ),
    st.builds(
        lambda c, a: f'<if cond="{c}">{a}<else/></if>', EXPRESSIONS, st.just('<raise event="F"/>')
    ),
    st.builds(
        lambda e: f'<foreach array="{e}" item="i"><assign location="x" expr="x + [i]"/></foreach>',
        EXPRESSIONS,
    ),
)
TRANSITIONS = st.builds(
    lambda ev, tgt, cond: f"<transition{ev}{tgt}{cond}/>",
    st.sampled_from(["", ' event="E"', ' event="F"', ' event="*"', ' event="error.*"']),
    st.one_of(st.just(""), IDS.map(lambda i: f' target="{i}"')),
    st.one_of(st.just(""), EXPRESSIONS.map(lambda e: f' cond="{e}"')),
)


def _state(children: list[str], kind: str, state_id: str) -> str:
    attrs = f' id="{state_id}"' if state_id else ""
    return f"<{kind}{attrs}>{''.join(children)}</{kind}>"


LEAVES = st.one_of(
    st.builds(
        _state,
        st.lists(
            st.one_of(TRANSITIONS, ACTIONS.map(lambda a: f"<onentry>{a}</onentry>")), max_size=3
        ),
        st.just("state"),
        IDS,
    ),
    st.builds(_state, st.just([]), st.sampled_from(["final", "history"]), IDS),
)
STATES = st.recursive(
    LEAVES,
    lambda inner: st.builds(
        _state,
        st.lists(st.one_of(inner, TRANSITIONS), min_size=1, max_size=4),
        st.sampled_from(["state", "parallel"]),
        IDS,
    ),
    max_leaves=10,
)
HOSTILE_SCXML = st.sampled_from(
    [
        '<?xml version="1.0"?><!DOCTYPE scxml [<!ENTITY '
        'a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;">]>',
        '<!DOCTYPE scxml SYSTEM "file:///etc/passwd">',
        "",
        "\x00",
        "<?xml version='1.0'?>",
    ]
)


def _unique_ids(body: str) -> str:
    """Later states reusing an id get a suffix (duplicate ids would hide every other check)."""
    seen: dict[str, int] = {}

    def rename(match: re.Match[str]) -> str:
        name = match.group(1)
        seen[name] = seen.get(name, 0) + 1
        return match.group(0) if seen[name] == 1 else f' id="{name}_{seen[name]}"'

    return re.sub(r' id="([^"]*)"', rename, body)


@FUZZ
@given(
    states=st.lists(STATES, min_size=1, max_size=3),
    prefix=st.one_of(st.just(""), st.just(""), HOSTILE_SCXML),
    data_expr=EXPRESSIONS,
    depth=st.sampled_from([0, 0, 0, 0, 0, 150, 1000]),
    cut=st.integers(0, 2000),
)
def test_fuzzed_scxml_documents_load_or_name_the_line(
    states: list[str], prefix: str, data_expr: str, depth: int, cut: int
) -> None:
    body = _unique_ids("".join(states))
    if depth:
        body = "<state>" * depth + "</state>" * depth + body
    document = (
        f'{prefix}<scxml xmlns="http://www.w3.org/2005/07/scxml" datamodel="python">'
        f'<datamodel><data id="x" expr="{data_expr}"/></datamodel>{body}</scxml>'
    )
    if cut % 10 == 0:
        document = document[:cut]  # a truncated document
    with bounded():
        try:
            machine = load_scxml(document)
        except ScxmlError as exc:
            outcome("ScxmlError: " + re.sub(r"[\d'\"].*", "", str(exc).split(": ", 1)[-1])[:40])
            assert SCXML_WHERE.match(str(exc)), str(exc)
            return
        outcome("loaded")
        run_briefly(machine, ["E", "F", "error.x"])


# -- YAML machine files ---------------------------------------------------------------------

YAML_NOISE = st.sampled_from(
    [
        "",
        "\n  on: yes\n",
        "\n- [",
        "\n&a x: *a\n",
        "\nid: m\nid: n\n",
        "\n!!python/object:os.system {}\n",
        "\n\t",
        ": :",
        "\non:\n  off: on\n",
        "\x00",
    ]
)


@FUZZ
@given(data=st.data())
def test_fuzzed_yaml_machine_files_load_or_name_the_file(data: Any, tmp_path: Path) -> None:
    import yaml

    config = mutate(
        BASE,
        data,
        st.one_of(
            json_values(),
            st.sampled_from(["yes", "no", "on", "off", "~", "2020-01-01", "0x10", "1e3"]),
        ),
    )
    text = yaml.safe_dump(config, default_flow_style=data.draw(st.booleans()))
    noise = data.draw(st.one_of(st.just(""), YAML_NOISE))
    at = data.draw(st.integers(0, len(text)))
    file = tmp_path / "machine.yaml"
    file.write_text(text[:at] + noise + text[at:])
    with bounded():
        try:
            machine = load_machine(file, **implementations())
        except MachineDefinitionError as exc:
            lines = str(exc).splitlines()[1:]
            assert lines and (lines[0].startswith(f"  {file}:") or PROBLEM.match(lines[0])), str(
                exc
            )
            outcome("file error" if lines[0].startswith(f"  {file}:") else "definition error")
            return
        outcome("machine built")
        run_briefly(machine, data.draw(EVENTS))
