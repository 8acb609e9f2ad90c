"""What ``pip install statecharts`` gives a user, tested on the real artefacts.

Once per session: the repository's files (``git ls-files``: what a fresh clone holds) are copied
aside and built with ``python -m build`` (sdist, then the wheel from the sdist); the wheel and
every extra's dependencies are fetched into a wheelhouse (``pip download``, through pip's cache
and the configured index). Each test then gets a fresh venv (without pip; the suite's pip
installs into it with ``--python``) holding the wheel and only what one extra declares,
installed offline from the wheelhouse (``--no-index``), so a dependency an extra forgot to
declare is missing there. Scripts run in those venvs with ``python -I`` from a folder outside
the checkout, so nothing of the checkout is importable.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import venv
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.persistence.conftest import pg_dsn, pg_schema

ROOT = Path(__file__).resolve().parents[2]
IN_VENV = Path(__file__).resolve().parent / "in_venv"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
USER_EXTRAS = sorted(set(PYPROJECT["optional-dependencies"]) - {"dev"})
"""The extras a user installs (``dev`` is the checkout's own tooling, installed by ``make``)."""
STEP_TIMEOUT_S = 300

__all__ = ["pg_dsn", "pg_schema"]


@dataclass(frozen=True)
class Dists:
    """The built sdist and wheel."""

    sdist: Path
    wheel: Path


def run(args: list[str | Path], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run a command, bounded in time; fail the test with its output if it fails."""
    result = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=STEP_TIMEOUT_S, **kwargs
    )
    if result.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, args))} exited {result.returncode}:\n"
            f"{result.stdout}\n{result.stderr}"
        )
    return result


def _pip(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args])


def _source_copy(dest: Path) -> Path:
    """The repository's files, as a fresh clone (plus files not yet committed) has them."""
    listed = run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT
    ).stdout.split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    """``python -m build`` of the repository: the sdist, and the wheel built from it."""
    source = _source_copy(tmp_path_factory.mktemp("source"))
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--outdir", out, source])
    (sdist,), (wheel,) = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    return Dists(sdist, wheel)


@pytest.fixture(scope="session")
def wheelhouse(dists: Dists, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel and the dependencies of every user extra, as wheels in one folder."""
    folder = tmp_path_factory.mktemp("wheelhouse")
    _pip(
        "download",
        "--quiet",
        "--only-binary=:all:",
        "--dest",
        folder,
        f"{dists.wheel}[{','.join(USER_EXTRAS)}]",
    )
    return folder


@dataclass(frozen=True)
class Venv:
    """A fresh virtual environment with the wheel installed."""

    path: Path
    workdir: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def script(self, name: str) -> Path:
        return self.path / "bin" / name

    def run(self, script: str, *args: str | Path) -> str:
        """``python -I in_venv/<script> args`` here, from the venv's work folder; stdout."""
        return run(
            [self.python, "-I", IN_VENV / script, *args], cwd=self.workdir, env=clean_env()
        ).stdout

    def python_code(self, code: str) -> subprocess.CompletedProcess[str]:
        """``python -I -c code`` here, without failing on a non-zero exit."""
        return subprocess.run(
            [str(self.python), "-I", "-c", code],
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT_S,
            env=clean_env(),
        )

    def pip(self, *args: str | Path) -> str:
        return _pip("--python", self.python, *args).stdout

    def distributions(self) -> set[str]:
        listed = self.pip("list", "--format=freeze").splitlines()
        return {line.split("==")[0].lower().replace("_", "-") for line in listed if line}


def clean_env() -> dict[str, str]:
    """This process's environment without anything that would leak the checkout in."""
    return {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
    }


def make_venv(base: Path, requirement: str, wheelhouse: Path) -> Venv:
    """A venv in `base` with `requirement` (the wheel, with extras) from the wheelhouse only."""
    venv.create(base / "env", with_pip=False, symlinks=True)
    environment = Venv(base / "env", base / "work")
    environment.workdir.mkdir()
    environment.pip("install", "--quiet", "--no-index", "--find-links", wheelhouse, requirement)
    return environment


@pytest.fixture(scope="session")
def fresh_venv(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Venv]:
    """``fresh_venv("")`` (core only) or ``fresh_venv("ui")``: a venv with the wheel and only
    what that extra declares. All are made at once, a few at a time, on first use."""
    bases = {
        extra: tmp_path_factory.mktemp(f"venv-{extra or 'core'}") for extra in ("", *USER_EXTRAS)
    }
    with ThreadPoolExecutor(max_workers=3) as pool:
        pending = {
            extra: pool.submit(
                make_venv, base, f"statecharts[{extra}]" if extra else "statecharts", wheelhouse
            )
            for extra, base in bases.items()
        }
        made = {extra: future.result() for extra, future in pending.items()}
    return made.__getitem__
