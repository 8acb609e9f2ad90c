"""Golden files: the DOT and Mermaid text of machines using every construct.

A diff in a golden file is a change a reviewer will see in every diagram, so it must be
deliberate. Regenerate after an intended change with:

    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/render/test_golden.py

and review the diff of tests/render/golden/ (and the PNGs: see docs/diagrams.md).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statecharts.guards import GuardSpec
from statecharts.nodes import StateNode
from statecharts.render import to_dot, to_mermaid

from .examples import EXAMPLES

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


def _check(name: str, actual: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(actual, encoding="utf-8")
    assert path.is_file(), f"{path} is missing: run with UPDATE_GOLDEN=1 to create it"
    expected = path.read_text(encoding="utf-8")
    assert actual == expected, (
        f"{name} differs from its golden file; if the change is "
        f"intended, regenerate with UPDATE_GOLDEN=1 and review the diff"
    )


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_dot_matches_golden(name: str) -> None:
    _check(f"{name}.dot", to_dot(EXAMPLES[name]()))


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_mermaid_matches_golden(name: str) -> None:
    _check(f"{name}.mmd", to_mermaid(EXAMPLES[name]()))


def _all_nodes() -> list[StateNode]:
    return [node for build in EXAMPLES.values() for node in build().definition.nodes]


def _kinds(guard: GuardSpec) -> set[str]:
    return {guard.type}.union(*(_kinds(child) for child in guard.children))


def test_the_examples_cover_every_construct() -> None:
    """The goldens only protect what the examples use: make sure that is everything."""
    nodes = _all_nodes()
    transitions = [t for n in nodes for t in (*n.transitions, *n.always)]
    assert {n.type for n in nodes} == {"atomic", "compound", "parallel", "final", "history"}
    assert {n.history for n in nodes if n.type == "history"} == {"shallow", "deep"}
    assert any(n.history_default for n in nodes)
    assert any(n.parent is None and n.type == "parallel" for n in nodes)
    assert any(n.description for n in nodes)
    assert any(n.entry for n in nodes) and any(n.exit for n in nodes)
    invokes = [i for n in nodes for i in n.invoke]
    assert {i.retry.backoff for i in invokes if i.retry} == {"exponential", "fixed", "linear"}
    assert any(t.actions and t.actions[0].type == "recordSkip" for t in transitions)
    events = {t.event or "" for t in transitions}
    assert "" in events  # eventless
    assert any(e.startswith("xstate.error.actor.") for e in events)
    assert any(e.startswith("xstate.done.actor.") for e in events)
    assert any(e.startswith("xstate.done.state.") for e in events)
    assert {"*", "order.*"} <= events
    assert {type(t.delay) for t in transitions if t.delay is not None} == {int, str}
    guards = {kind for t in transitions if t.guard is not None for kind in _kinds(t.guard)}
    assert {"and", "or", "stateIn"} <= guards
    assert any(t.guard is not None and t.guard.params for t in transitions)
    assert any(not t.targets and t.actions for t in transitions)  # stays, does something
    assert any(t.reenter for t in transitions)
    assert any(len(t.targets) > 1 for t in transitions)
    assert any(t.description for t in transitions)
