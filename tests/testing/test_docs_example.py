"""docs/testing.md's worked example runs as written, prints what the page shows, and
without its guard the harness finds the bug the page describes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "testing.md"


def _example() -> str:
    text = PAGE.read_text()
    found = re.search(r"<!-- worked-example -->\n```python\n(.*?)```", text, re.DOTALL)
    assert found, "docs/testing.md lost its worked example"
    return found.group(1)


def _run(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "renewal.py"
    script.write_text(code)
    return subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )


def test_worked_example_runs_as_printed(tmp_path: Path) -> None:
    result = _run(_example(), tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "machine 'renewal': states 10/10, transitions 11/11\nall checks passed\n"
    )
    shown = PAGE.read_text().split("It prints\n\n```\n", 1)[1].split("```", 1)[0]
    assert shown == result.stdout


def test_worked_example_without_the_guard(tmp_path: Path) -> None:
    guard = '"paidInFull": lambda ctx, ev: ev["output"]["amount"] == ctx["price"]'
    code = _example()
    assert guard in code
    result = _run(code.replace(guard, '"paidInFull": lambda ctx, ev: True'), tmp_path)
    assert result.returncode != 0
    assert "InvariantViolation: invariant '<lambda>' (in state 'renewed') failed" in result.stderr
    assert (
        "events: xstate.done.actor.load_plan {'output': {'plan': 'pro', 'price': 1200}} "
        "-> xstate.done.actor.charge {'output': {'amount': 0}} -> "
        "xstate.done.actor.send_receipt {'output': 'msg-1'}" in result.stderr
    )
