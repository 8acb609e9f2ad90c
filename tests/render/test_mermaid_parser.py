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


@pytest.mark.skipif(not MODULES or shutil.which("node") is None,
                    reason="set STATECHARTS_MERMAID_MODULES to a node_modules with mermaid "
                           "and jsdom to parse the Mermaid output with the real library")
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
    broken.write_text("stateDiagram-v2\n  state \"A\" as a {\n  --\n")
    result = subprocess.run(["node", str(script), *files], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    # the checker does reject bad input
    bad = subprocess.run(["node", str(script), str(broken)], capture_output=True, text=True,
                         check=False)
    assert bad.returncode == 1 and "FAIL" in bad.stdout
