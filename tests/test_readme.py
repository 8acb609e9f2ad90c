"""The README's example runs and prints what its comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_example() -> tuple[str, list[str]]:
    """The code of "A machine in a few lines" and the lines its comments say it prints."""
    code = re.search(r"## A machine in a few lines\n\n```python\n(.*?)```", README.read_text(),
                     re.S)
    assert code is not None
    expected = [line.split("# ", 1)[1].strip() for line in code.group(1).splitlines()
                if line.startswith("print(")]
    return code.group(1), expected


def test_readme_example_runs_as_written() -> None:
    code, expected = readme_example()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {})
    assert out.getvalue().splitlines() == expected


def test_readme_opens_with_the_two_commands() -> None:
    lines = README.read_text().splitlines()
    block = lines[lines.index("```sh") + 1: lines.index("```sh") + 3]
    assert [line.split("#")[0].strip() for line in block] == ["make demo", "make test"]
