"""How `make test` spreads the suite over pytest-xdist workers (``-n auto --dist loadfile``).

``-n auto`` is one worker per core and one more (`WORKERS_BEYOND_CORES`; at most 4 by the
Makefile's ``--maxprocesses``): the suite waits on subprocess workers, timers, leases and
PostgreSQL much of its time, so a core holds more than one worker's work (on 2 cores, the
whole suite took 719 and 765 s on 2 workers, 595-753 s on 3 (median 668 s of five), 603 s
on 4, whose peak of 76 PostgreSQL connections is near the default limit of 100; 71 on 3).
``PYTEST_XDIST_AUTO_NUM_WORKERS`` still sets the number, as pytest-xdist documents.

Whole files go to one worker, so a module's fixtures (a Chromium,
a built documentation site, the downloaded SCXML suite) are made once, and two workers never
extract the same download side by side. ``tests/packaging`` is one unit: its files share the
session's built wheel, wheelhouse and venvs, which would otherwise be built once per worker.

A worker runs many files in one process, so a thread one test leaves running meets the tests
after it: a PostgreSQL store's wake-up listener left by a store never closed fails the test
that left it (`no_listener_outlives_its_test`), not a later one that counts listeners.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from persistence.stores.postgres_connections import LISTENER_THREAD

WORKERS_BEYOND_CORES = 1
"""How many more workers than cores ``-n auto`` starts."""

LISTENER_GRACE_S = 5.0
"""How long a listener may take to end after its test (a closing store joins it for 2 s, and
one still connecting ends once connected)."""

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
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: the cores this process may run on and `WORKERS_BEYOND_CORES` more (None,
    pytest-xdist's own answer, when ``PYTEST_XDIST_AUTO_NUM_WORKERS`` says how many)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    affinity = getattr(os, "sched_getaffinity", None)  # (not on macOS)
    cores = len(affinity(0)) if affinity is not None else os.cpu_count() or 1
    return cores + WORKERS_BEYOND_CORES


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


def listener_threads() -> set[threading.Thread]:
    """The wake-up listener threads alive in this process (a store's, until it closes)."""
    return {t for t in threading.enumerate() if t.name == LISTENER_THREAD and t.is_alive()}


@pytest.fixture(autouse=True)
def no_listener_outlives_its_test() -> Iterator[None]:
    """A store a test opens, it closes: a wake-up listener the test started and left running
    fails it (once `LISTENER_GRACE_S` has passed without the thread ending)."""
    before = listener_threads()
    yield
    deadline = time.monotonic() + LISTENER_GRACE_S
    while (left := listener_threads() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"{len(left)} wake-up listener thread(s) left running: a store not closed"
