"""Opt-in: the Mermaid output parsed by the real Mermaid library (under Node.js).

Needs Node.js and a folder with ``mermaid`` and ``jsdom`` installed
(``npm install mermaid@11 jsdom@24`` in it); point ``STATECHARTS_MERMAID_MODULES`` at its
``node_modules``. Skipped otherwise: the default suite needs no npm packages.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from statecharts.render import to_mermaid

from .examples import EXAMPLES, constructs

MODULES = os.environ.get("STATECHARTS_MERMAID_MODULES")


@pytest.mark.skipif(
    not MODULES or shutil.which("node") is None,
    reason="set STATECHARTS_MERMAID_MODULES to a node_modules with mermaid "
    "and jsdom to parse the Mermaid output with the real library",
)
def test_mermaid_output_parses_with_the_real_mermaid(tmp_path: Path) -> None:
    assert MODULES is not None
    script = tmp_path / "check.mjs"
    script.write_text((Path(__file__).parent / "mermaid_check.mjs").read_text())
    (tmp_path / "node_modules").symlink_to(MODULES)
    files = []
    for name, build in sorted(EXAMPLES.items()):
        path = tmp_path / f"{name}.mmd"
        path.write_text(to_mermaid(build()))
        files.append(str(path))
    machine = constructs()
    snapshot, _ = machine.initial_transition()
    (tmp_path / "highlighted.mmd").write_text(to_mermaid(machine, snapshot))
    files.append(str(tmp_path / "highlighted.mmd"))
    broken = tmp_path / "broken.mmd"
    broken.write_text('stateDiagram-v2\n  state "A" as a {\n  --\n')
    result = subprocess.run(
        ["node", str(script), *files], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # the checker does reject bad input
    bad = subprocess.run(
        ["node", str(script), str(broken)], capture_output=True, text=True, check=False
    )
    assert bad.returncode == 1 and "FAIL" in bad.stdout


@pytest.mark.skipif(
    not MODULES or shutil.which("node") is None,
    reason="set STATECHARTS_MERMAID_MODULES to a node_modules with mermaid "
    "and jsdom to read the Mermaid output with the real library",
)
def test_mermaid_reads_labels_as_written(tmp_path: Path) -> None:
    # before: '#' was drawn as "no. ", '{' as '(', '<' as a look-alike and ';' as ',' (a ';' ends a
    # Mermaid statement: "a; b" drew "a" and made states named ';' and 'b')
    import json

    from statecharts import create_machine

    said = 'Fail (#1): {{ $json.error }}; code < 2 > 1 "quoted" --> here'
    machine = create_machine(
        {
            "id": "m",
            "initial": "a",
            "states": {
                "a": {
                    "description": f"A\n{said}",
                    "on": {"GO": {"target": "b", "description": said}},
                },
                "b": {"description": said, "initial": "c", "states": {"c": {}}},
            },
        }
    )
    script = tmp_path / "text.mjs"
    script.write_text((Path(__file__).parent / "mermaid_text.mjs").read_text())
    (tmp_path / "node_modules").symlink_to(str(MODULES))
    path = tmp_path / "m.mmd"
    path.write_text(to_mermaid(machine))
    result = subprocess.run(
        ["node", str(script), str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    read = json.loads(result.stdout.strip().splitlines()[-1])
    assert read["states"]["s_a"] == ["A", said]
    assert read["states"]["s_b"] == [f"B<br>{said}"]  # a composite's title, in quotes
    assert ["s_a", "s_b", said] in read["arrows"]
    assert set(read["states"]) == {"root_start", "s_a", "s_b", "s_key"}  # no stray states
