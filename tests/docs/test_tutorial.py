"""docs/tutorial.md is run as written: its Python blocks, in order, in one namespace, in a
fresh folder (the first block is also saved as the ``signup.py`` it says to save, so the
module can be imported as the page's commands do), and each block's printed output must be
the ``text`` block that follows it on the page."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of each fenced block, in page order."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(text)]


def python_steps(text: str) -> list[tuple[str, str | None]]:
    """Each Python block with the ``text`` block right after it (its expected output)."""
    found = blocks(text)
    steps = []
    for i, (language, code) in enumerate(found):
        if language == "python":
            following = found[i + 1] if i + 1 < len(found) else None
            expected = following[1] if following and following[0] == "text" else None
            steps.append((code, expected))
    return steps


def test_the_page_has_the_six_steps() -> None:
    text = TUTORIAL.read_text(encoding="utf-8")
    headings = re.findall(r"^## (\d)\. (.+)$", text, re.M)
    assert [title for _, title in headings] == [
        "Define the workflow",
        "Run it in memory",
        "Run it durably, with a worker",
        "Deliver an event",
        "See it in the operator UI",
        "Test it with the kit",
    ]
    assert len(python_steps(text)) >= 6


def test_every_python_block_runs_and_prints_what_the_page_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = python_steps(TUTORIAL.read_text(encoding="utf-8"))
    first = steps[0][0]
    assert first.startswith("# signup.py\n")
    (tmp_path / "signup.py").write_text(first, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "signup", raising=False)
    namespace: dict[str, object] = {"__name__": "tutorial"}
    for number, (code, expected) in enumerate(steps, 1):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"{TUTORIAL.name} block {number}", "exec"), namespace)
        if expected is not None:
            assert out.getvalue() == expected, f"block {number} printed:\n{out.getvalue()}"
    assert (tmp_path / "signup.db").is_file()  # the durable part really wrote the store
    monkeypatch.delitem(sys.modules, "signup", raising=False)
    _the_page_commands_work(tmp_path, str(namespace["run_id"]))


def _statecharts(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed ``statecharts`` console script (not ``python -m``, which would put the
    folder on the import path by itself), run in ``folder``."""
    script = Path(sys.executable).parent / "statecharts"
    command = [str(script)] if script.exists() else [shutil.which("statecharts") or "statecharts"]
    return subprocess.run(
        [*command, *args], cwd=folder, capture_output=True, text=True, timeout=120, check=False
    )


def _the_page_commands_work(folder: Path, run_id: str) -> None:
    """The page's shell commands, on the folder the Python blocks left behind."""
    text = TUTORIAL.read_text(encoding="utf-8")
    commands = [
        line
        for language, code in blocks(text)
        if language == "sh"
        for line in code.splitlines()
        if line.startswith("statecharts ")
    ]
    assert "statecharts render signup:machine -o signup.svg" in commands
    drawn = _statecharts(folder, "render", "signup:machine", "--format", "mermaid")
    assert drawn.returncode == 0, drawn.stderr
    assert 'state "Waiting for confirmation" as' in drawn.stdout
    assert "idempotency key: the same on every try" in drawn.stdout
    shown = _statecharts(folder, "runs", "show", run_id, "--store", "sqlite:///signup.db")
    assert shown.returncode == 0, shown.stderr
    assert "CONFIRMED" in shown.stdout and "active" in shown.stdout
    for command in commands:  # the long-running ones: their options at least parse
        if command.startswith(("statecharts worker", "statecharts ui")):
            parsed = _statecharts(folder, *command.split()[1:2], "--help")
            assert parsed.returncode == 0
            for option in re.findall(r"--[a-z-]+", command):
                assert option in parsed.stdout, (command, option)


def test_the_saved_module_is_what_the_commands_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`statecharts render signup:machine` and `--machines signup` import the saved file."""
    from statecharts.render.source import load_machine_for_drawing

    (tmp_path / "signup.py").write_text(python_steps(TUTORIAL.read_text())[0][0])
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "signup", raising=False)
    machine = load_machine_for_drawing("signup:machine")
    assert machine.id == "signup"
    monkeypatch.delitem(sys.modules, "signup", raising=False)
