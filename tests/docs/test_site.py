"""The documentation site builds with ``mkdocs build --strict`` (broken links, missing pages
and API references that do not resolve fail the build), its API reference covers every public
name, and its command-line page lists every command and option of the real parser."""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_MODULES = ("statecharts", "statecharts.render", "statecharts.testing", "persistence")


def _mkdocs() -> list[str]:
    try:
        importlib.import_module("mkdocs")
        importlib.import_module("material")
        importlib.import_module("mkdocstrings_handlers.python")
    except ImportError as exc:
        message = (
            f"{exc.name} is not installed: the docs site cannot be built (pip install -e '.[dev]')"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return [sys.executable, "-m", "mkdocs"]


def _build(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    # not -q: it hides the warnings, and --strict only counts the warnings it logs
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [*_mkdocs(), "build", "--strict", "-d", str(site)],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = _build(ROOT, out)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def _inventory(site: Path) -> set[str]:
    """The objects mkdocstrings documented (the Sphinx-style objects.inv it writes)."""
    data = (site / "objects.inv").read_bytes()
    body = zlib.decompress(data.split(b"\n", 4)[4]).decode()
    return {line.split()[0] for line in body.splitlines() if line.strip()}


def test_the_site_builds_strict_and_has_the_tutorial_and_topics(site: Path) -> None:
    for page in (
        "index.html",
        "tutorial/index.html",
        "diagrams/index.html",
        "ui/index.html",
        "reference/statecharts/index.html",
        "reference/cli/index.html",
    ):
        assert (site / page).is_file(), page
    assert "your first durable workflow" in (site / "tutorial/index.html").read_text()


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_name_has_a_reference_entry(site: Path, module_name: str) -> None:
    documented = _inventory(site)
    module = importlib.import_module(module_name)
    missing = [name for name in module.__all__ if f"{module_name}.{name}" not in documented]
    assert not missing, f"{module_name}: not in the API reference: {missing}"
    assert "persistence.Runtime.stuck" in documented  # methods too, from their docstrings


def test_the_cli_page_lists_every_command_and_option(site: Path) -> None:
    from statecharts.cli import build_parser

    page = (site / "reference/cli/index.html").read_text()

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    assert f"{name} {sub_name}" in page, f"{name} {sub_name}"
                    walk(sub, f"{name} {sub_name}")
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert option in page, f"{name}: {option}"

    walk(build_parser(), "statecharts")


def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(ROOT / "docs", project / "docs")
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    shutil.copytree(ROOT / "scripts", project / "scripts")
    for package in ("statecharts", "persistence"):
        (project / package).symlink_to(ROOT / package)
    (project / "docs" / "tutorial.md").write_text(
        (ROOT / "docs" / "tutorial.md").read_text() + "\nSee [nowhere](no-such-page.md).\n"
    )
    result = _build(project, tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stdout + result.stderr
