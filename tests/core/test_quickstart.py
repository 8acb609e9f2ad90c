"""docs/quickstart.md stays true: its code block runs and prints what the page says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

QUICKSTART = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", QUICKSTART.read_text(), flags=re.DOTALL)


def test_quickstart_code_runs_and_prints_the_documented_output() -> None:
    (code,) = _blocks("python")
    (expected,) = _blocks("text")
    assert len(code.strip().splitlines()) < 30  # the issue: "in under 30 lines"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(QUICKSTART), "exec"), {"__name__": "quickstart"})
    assert out.getvalue() == expected
