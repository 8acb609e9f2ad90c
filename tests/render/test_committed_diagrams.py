"""The committed ``diagrams/`` folder is current for every machine under ``machines/``.

Fails when a machine changed without ``statecharts diagrams`` (or ``make diagrams``) being
run and the result committed; the failure lists each stale file and why. Checking compares
the Mermaid files and the index byte for byte and each SVG's stamped DOT hash, so it needs no
Graphviz.
"""

from __future__ import annotations

from pathlib import Path

from statecharts.render.diagrams import stale_files

ROOT = Path(__file__).resolve().parents[2]


def test_committed_diagrams_are_current() -> None:
    machines, diagrams = ROOT / "machines", ROOT / "diagrams"
    if not machines.is_dir():
        assert not list(diagrams.glob("*.svg")), "diagrams/ has SVGs but there is no machines/"
        return
    stale = stale_files(machines, diagrams)
    assert not stale, (
        "stale diagrams (run `statecharts diagrams` and commit diagrams/):\n" + "\n".join(stale)
    )
