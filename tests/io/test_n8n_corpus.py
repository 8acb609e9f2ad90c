"""Every real export in the corpus imports, validates with the engine, and is accounted for:
every canvas node is mapped once and every hidden state is a real state of the machine."""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from statecharts.io.n8n import HIDDEN_KINDS, from_n8n
from statecharts.io.n8n.validation import build_machines
from tests.io.n8n_corpus import CORPUS, MISSING, corpus_files

FILES = corpus_files()
pytestmark = pytest.mark.skipif(not FILES, reason=MISSING)
NO_RENDERER = importlib.util.find_spec("statecharts.render") is None


def test_the_corpus_holds_the_25_listed_exports() -> None:
    listed = (CORPUS / "SOURCES.md").read_text(encoding="utf-8")
    assert len(FILES) == 25
    for path in FILES:
        assert f"`{path.name}`" in listed


@pytest.mark.parametrize("path", FILES, ids=[p.stem[:60] for p in FILES])
def test_corpus_workflow_imports_and_passes_engine_validation(path: Path) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    result = from_n8n(data, "w")
    primary, error = build_machines(result)  # the engine checks targets and every name
    assert (error is None) == (result.error_config is None)

    # state count in the report == states the engine built (retry expansions included)
    assert result.state_count == len(primary.definition.nodes) - 1
    if error is not None:
        assert result.error_machine is not None
        assert result.error_machine.state_count == len(error.definition.nodes) - 1

    # every hidden state is a real state of the machine it belongs to
    for machine_import, machine in ((result.primary, primary), (result.error_machine, error)):
        if machine_import is None or machine is None:
            continue
        for hidden in machine_import.hidden_states:
            assert hidden.kind in HIDDEN_KINDS
            node = machine.get_state_node(f"{machine.id}.{hidden.state}")
            assert node is not None
            assert hidden.reason

    # every canvas node except sticky notes is accounted for exactly once
    canvas = [n["name"] for n in data["nodes"] if n["type"] != "n8n-nodes-base.stickyNote"]
    assert [m.node for m in result.nodes] == canvas
    assert result.node_count == len(canvas)
    for mapping in result.nodes:
        if mapping.state is not None:
            owner = primary if not mapping.how.startswith("(machine") else error
            assert owner is not None
            assert owner.get_state_node(f"{owner.id}.{mapping.state}") is not None

    # it starts: waiting for a trigger, or (an error workflow) already working
    snapshot, _ = primary.initial_transition()
    assert snapshot.status == "active"


@pytest.mark.skipif(NO_RENDERER, reason="statecharts.render (the diagram renderer) is not here")
@pytest.mark.parametrize("path", FILES, ids=[p.stem[:60] for p in FILES])
def test_corpus_workflow_renders(path: Path) -> None:
    render = importlib.import_module("statecharts.render")
    result = from_n8n(json.loads(path.read_text(encoding="utf-8")), "w")
    for machine in build_machines(result):
        if machine is None:
            continue
        assert "stateDiagram-v2" in render.to_mermaid(machine)
        dot = render.to_dot(machine)
        assert dot.lstrip().startswith(("digraph", "strict digraph"))
        if shutil.which("dot"):
            assert "<svg" in render.to_svg(machine)
