"""How `make test` spreads the suite over pytest-xdist workers (``-n auto --dist loadfile``).

Whole files go to one worker, so a module's fixtures (a Chromium,
a built documentation site, the downloaded SCXML suite) are made once, and two workers never
extract the same download side by side. ``tests/packaging`` is one unit: its files share the
session's built wheel, wheelhouse and venvs, which would otherwise be built once per worker.
"""

from __future__ import annotations

from typing import Any

import pytest

SHARED_SESSION_DIRS = ("tests/packaging/",)
"""Folders whose files share session fixtures too costly to make twice."""


def scope_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its folder if listed above, else its file."""
    path = nodeid.split("::", 1)[0]
    for folder in SHARED_SESSION_DIRS:
        if path.startswith(folder):
            return folder
    return path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadfile``: whole files (or the folders above) per worker."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return FileScheduling(config, log)
