"""The built wheel and sdist, read back: the files a user gets and the metadata pip shows."""

from __future__ import annotations

import tarfile
import zipfile
from collections.abc import Callable
from email.message import Message
from email.parser import Parser
from pathlib import PurePosixPath

import pytest

from .conftest import PYPROJECT, ROOT, Dists

WHEEL_PACKAGES = {"statecharts", "persistence"}
CLASSIFIERS_NEEDED = {
    "Typing :: Typed",
    "Programming Language :: Python :: 3.11",
    "Operating System :: OS Independent",
}


def wheel_files(dists: Dists) -> list[str]:
    with zipfile.ZipFile(dists.wheel) as wheel:
        return sorted(wheel.namelist())


def _metadata(text: str) -> Message:
    return Parser().parsestr(text)


def wheel_metadata(dists: Dists) -> Message:
    with zipfile.ZipFile(dists.wheel) as wheel:
        name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        return _metadata(wheel.read(name).decode())


def sdist_files(dists: Dists) -> list[str]:
    with tarfile.open(dists.sdist) as sdist:
        return sorted(
            str(PurePosixPath(*PurePosixPath(n).parts[1:]))
            for n in sdist.getnames()
            if len(PurePosixPath(n).parts) > 1
        )


def sdist_metadata(dists: Dists) -> Message:
    with tarfile.open(dists.sdist) as sdist:
        member = next(
            m for m in sdist.getmembers() if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")
        )
        handle = sdist.extractfile(member)
        assert handle is not None
        return _metadata(handle.read().decode())


def test_the_wheel_ships_the_library_and_nothing_else(dists: Dists) -> None:
    files = wheel_files(dists)
    tops = {name.split("/")[0] for name in files if not name.split("/")[0].endswith(".dist-info")}
    assert tops == WHEEL_PACKAGES, "machines/ (the demo's workflows) stays in the repository"
    for marker in ("statecharts/py.typed", "persistence/py.typed", "statecharts/config.py"):
        assert marker in files
    assert any(n.startswith("persistence/migrations/sqlite/") for n in files)
    assert any(n.startswith("persistence/migrations/postgres/") for n in files)
    assert any(n.startswith("persistence/ui/templates/") for n in files)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in files)
    every_module = {
        str(p.relative_to(ROOT))
        for package in WHEEL_PACKAGES
        for p in (ROOT / package).rglob("*.py")
    }
    assert every_module <= set(files), sorted(every_module - set(files))


def test_the_sdist_builds_that_wheel_from_the_library_alone(dists: Dists) -> None:
    files = sdist_files(dists)
    tops = {name.split("/")[0] for name in files}
    assert tops == {
        "LICENSE",
        "MANIFEST.in",
        "PKG-INFO",
        "README.md",
        "pyproject.toml",
        "setup.cfg",
        "statecharts.egg-info",
        *WHEEL_PACKAGES,
    }
    assert {f for f in wheel_files(dists) if f.split("/")[0] in WHEEL_PACKAGES} <= set(files)


@pytest.mark.parametrize("read", [wheel_metadata, sdist_metadata], ids=["wheel", "sdist"])
def test_the_metadata_is_complete(dists: Dists, read: Callable[[Dists], Message]) -> None:
    meta = read(dists)
    assert meta["Name"] == "statecharts"
    assert meta["License-Expression"] == "MIT"
    assert meta["License-File"] == "LICENSE"
    assert meta["Requires-Python"] == ">=3.11"
    assert meta["Summary"] == PYPROJECT["description"]
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload().startswith("# statecharts")  # the README is the long description
    # The project has no public home yet: the metadata carries exactly the URLs pyproject names.
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert urls == PYPROJECT.get("urls", {})
    classifiers = set(meta.get_all("Classifier") or [])
    assert classifiers >= CLASSIFIERS_NEEDED
    assert classifiers == set(PYPROJECT["classifiers"])
    assert meta.get_all("Requires-Dist")[0] == "orjson>=3.9"
    extras = set(meta.get_all("Provides-Extra") or [])
    assert extras == set(PYPROJECT["optional-dependencies"])
    assert "diagrams" not in extras  # dot runs as a program; no Python package needed
