"""The README's example runs and prints what its comments say."""

from __future__ import annotations

import contextlib
import io
import re
import tomllib
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_example() -> tuple[str, list[str]]:
    """The code of "A machine in a few lines" and the lines its comments say it prints."""
    code = re.search(
        r"## A machine in a few lines\n\n```python\n(.*?)```", README.read_text(), re.S
    )
    assert code is not None
    expected = [
        line.split("# ", 1)[1].strip()
        for line in code.group(1).splitlines()
        if line.startswith("print(")
    ]
    return code.group(1), expected


def test_readme_example_runs_as_written() -> None:
    code, expected = readme_example()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {})
    assert out.getvalue().splitlines() == expected


def test_readme_opens_with_the_two_commands() -> None:
    lines = README.read_text().splitlines()
    block = lines[lines.index("```sh") + 1 : lines.index("```sh") + 3]
    assert [line.split("#")[0].strip() for line in block] == ["make demo", "make test"]


def test_the_extras_table_lists_every_extra_a_user_installs() -> None:
    """Issue 44 item 9: the README's extras table lacked `otel` and `metrics`. Every extra of
    pyproject.toml but the checkout's own `dev` has a row, naming each package it adds."""
    project = tomllib.loads((README.parent / "pyproject.toml").read_text())["project"]
    extras = {
        name: deps for name, deps in project["optional-dependencies"].items() if name != "dev"
    }
    rows = dict(re.findall(r"^\| `([a-z]+)` \| ([^|]+) \|", README.read_text(), re.M))
    assert sorted(rows) == sorted(extras)
    for name, deps in extras.items():
        for dep in deps:
            package = re.split(r"[\[<>=]", dep)[0]
            assert package.lower().replace("-", "") in rows[name].lower().replace("-", ""), (
                name,
                package,
                rows[name],
            )
