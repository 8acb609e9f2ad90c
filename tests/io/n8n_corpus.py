"""The real n8n exports the import is tested on: ../shared/n8n-corpus/ next to the repo
(read-only, never copied in). Tests using them skip with a clear reason where it is absent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from statecharts.io.n8n import N8nImport, from_n8n

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "n8n-corpus"
MORE = CORPUS.parent / "n8n-corpus-more"
MISSING = f"the n8n corpus is not at {CORPUS} (expected next to the repository)"


def corpus_files() -> list[Path]:
    """Every workflow file in the corpus (empty when the corpus is absent)."""
    return sorted(CORPUS.glob("*.json")) if CORPUS.is_dir() else []


def corpus_path(name: str, folder: Path = CORPUS) -> Path:
    """The file of ``folder`` (the corpus, or `MORE`) whose name starts with ``name``; skips
    the test when absent."""
    if not folder.is_dir():
        pytest.skip(f"the n8n corpus is not at {folder} (expected next to the repository)")
    matches = [p for p in sorted(folder.glob("*.json")) if p.name.startswith(name)]
    if len(matches) != 1:
        pytest.skip(f"no single corpus file starting with {name!r} in {folder}")
    return matches[0]


def corpus_data(name: str) -> Any:
    """The parsed JSON of a corpus file."""
    return json.loads(corpus_path(name).read_text(encoding="utf-8"))


def imported(name: str) -> N8nImport:
    """``from_n8n`` of a corpus file, machine id ``w``."""
    return from_n8n(corpus_data(name), "w")


def state(result: N8nImport, path: str) -> dict[str, Any]:
    """The config of the state at dotted ``path`` (from the root) in the primary config."""
    return state_in(result.config, path)


def state_in(config: dict[str, Any], path: str) -> dict[str, Any]:
    """The config of the state at dotted ``path`` in ``config``."""
    node = config
    for key in path.split("."):
        node = node["states"][key]
    return node


def mapped_state(result: N8nImport, node: str) -> str:
    """The state path the n8n node ``node`` became."""
    for mapping in result.nodes:
        if mapping.node == node:
            assert mapping.state is not None, f"{node!r} has no state: {mapping.how}"
            return mapping.state
    raise AssertionError(f"no node {node!r} in the import")


def targets(transitions: Any) -> list[str]:
    """The target keys of a transition list (``#w.`` dropped), in order, without repeats."""
    items = transitions if isinstance(transitions, list) else [transitions]
    found = [t if isinstance(t, str) else t["target"] for t in items]
    return list(dict.fromkeys(t.split(".", 1)[1] for t in found))


def guarded_targets(transitions: Any) -> list[str]:
    """Only the targets a guard picks (the last, unguarded fallback left out)."""
    items = transitions if isinstance(transitions, list) else [transitions]
    return targets([t for t in items if isinstance(t, dict) and "guard" in t])


def route(result: N8nImport, action: dict[str, Any]) -> dict[str, Any]:
    """The static part of an ``n8n_route`` action: its entry in ``context.n8n.graph``."""
    assert action["type"] == "n8n_route", action
    return dict(result.config["context"]["n8n"]["graph"][action["params"]["route"]])


def connections(wires: list[tuple[str, int, str, int]]) -> dict[str, Any]:
    """An export's ``connections`` for ``wires`` as (from, output, to, input)."""
    found: dict[str, Any] = {}
    for source, output, target, index in wires:
        outputs = found.setdefault(source, {"main": []})["main"]
        while len(outputs) <= output:
            outputs.append([])
        outputs[output].append({"node": target, "type": "main", "index": index})
    return found
