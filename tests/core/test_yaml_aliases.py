"""Hostile YAML aliases through every command that reads a machine file: ``validate``,
``render``, ``diff`` of a file and ``diff git:REV:PATH``. Each runs in a subprocess whose address
space and time are bounded, so a regression fails (killed, or MemoryError) instead of taking the
machine's memory or hanging the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from statecharts.loading import MAX_YAML_NODES, read_yaml

RECURSIVE = "a: &a [*a]\n"  # 11 bytes: an infinite value
RECURSIVE_DEEP = "id: m\nstates: &s\n  x:\n    states: {y: {on: {E: [*s]}}}\n"
LAUGHS = (
    "\n".join(
        ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
        + [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 10)]
    )
    + "\n"
)
ADDRESS_SPACE = 1 << 29
"""512 MiB: the interpreter with the CLI's imports peaks near 40 MiB of it; the old loader
grew its stack towards it for as long as the test let it."""
TIMEOUT_S = 30

_BOUNDED = """\
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
from statecharts.cli import main
sys.exit(main(sys.argv[1:]))
"""


def statecharts(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``statecharts ARGS`` in a subprocess limited to ADDRESS_SPACE bytes and TIMEOUT_S."""
    try:
        return subprocess.run(
            [sys.executable, "-c", _BOUNDED.format(limit=ADDRESS_SPACE), *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"statecharts {' '.join(args)} did not finish in {TIMEOUT_S} s")


def committed(tmp_path: Path, name: str, text: str) -> Path:
    """A git repository in ``tmp_path`` whose HEAD holds ``name`` with ``text``."""
    (tmp_path / name).write_text(text)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for command in (["init", "-q"], ["add", name], ["commit", "-q", "-m", "bomb"]):
        subprocess.run([*git, *command], cwd=tmp_path, check=True, capture_output=True, timeout=30)
    return tmp_path


COMMANDS = {
    "validate": lambda file: ["validate", file],
    "render": lambda file: ["render", file, "--format", "dot"],
    "diff": lambda file: ["diff", file, file],
    "diff git": lambda file: ["diff", f"git:HEAD:{file}", file],
}


HOSTILE = {
    "recursive": (
        RECURSIVE,
        ["the alias *a refers to a node that contains it (a recursive alias)", "line 1, column 8"],
    ),
    "billion laughs": (
        LAUGHS,
        [f"bomb.yaml:6: aliases expand this YAML beyond {MAX_YAML_NODES} nodes"],
    ),
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_aliases_are_refused_within_bounds_naming_the_file_by_every_command(
    tmp_path: Path, command: str, case: str
) -> None:
    text, messages = HOSTILE[case]
    committed(tmp_path, "bomb.yaml", text)
    result = statecharts(*COMMANDS[command]("bomb.yaml"), cwd=tmp_path)
    assert result.returncode != 0
    assert "bomb.yaml" in result.stderr
    assert all(message in result.stderr for message in messages), result.stderr
    assert "MemoryError" not in result.stderr and "Traceback" not in result.stderr


def test_an_alias_to_an_ancestor_deeper_down_is_refused(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(RECURSIVE_DEEP)
    result = statecharts("validate", "m.yaml", cwd=tmp_path)
    assert result.returncode == 1
    assert "the alias *s refers to a node that contains it" in result.stderr
    assert "line 4" in result.stderr


def test_an_alias_used_twice_beside_its_anchor_still_reads() -> None:
    assert read_yaml("x: &a [1]\ny: [*a, {z: *a}]\n") == {"x": [1], "y": [[1], {"z": [1]}]}
