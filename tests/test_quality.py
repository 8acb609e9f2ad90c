"""The project's own rules, checked on every run: ruff clean, mypy clean on the engine, and
layers that point one way (the pure engine imports none of its tools or the packages above)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOL_FOLDERS = ("render", "testing", "io")
FORBIDDEN = ("persistence", "machines", "statecharts.render", "statecharts.testing",
             "statecharts.io", "statecharts.cli")


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed (pip install -e '.[dev]')")
    return found


def test_ruff_is_clean() -> None:
    result = subprocess.run([_tool("ruff"), "check", "."], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean_on_the_engine() -> None:
    result = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def _core_modules() -> list[Path]:
    package = ROOT / "statecharts"
    return [p for p in package.glob("*.py") if p.name != "cli.py"]


@pytest.mark.parametrize("module", _core_modules(), ids=lambda p: p.name)
def test_engine_core_imports_nothing_above_it(module: Path) -> None:
    tree = ast.parse(module.read_text(), str(module))
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the statecharts package
                base = "statecharts" if node.level == 1 else ""
                names = [f"{base}.{node.module}" if node.module else base]
                names += [f"{base}.{alias.name}" for alias in node.names if not node.module]
            else:
                names = [node.module or ""]
        for name in names:
            assert not name.startswith(FORBIDDEN), f"{module.name} imports {name}"
