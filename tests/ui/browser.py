"""Headless Chromium for the end-to-end tests, driven by Playwright for Python.

Debian's `chromium` is used (never a downloaded browser): /usr/bin/chromium, or the path in
STATECHARTS_CHROMIUM. Without it (or without the `playwright` package) the tests skip with the
reason, except under CI=true, where that is a failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-dev-shm-usage",
]
INSTALL_HINT = (
    "apt-get install chromium (Debian/Ubuntu; scripts/system-deps.sh does it) and pip install "
    "playwright (never `playwright install`: the system browser is used)"
)


def _skip_or_fail(reason: str) -> None:
    message = f"{reason}: the browser tests cannot run ({INSTALL_HINT})"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message + " -- CI=true requires them")
    pytest.skip(message)


def chromium_path() -> str:
    """The system Chromium's path (or skip/fail)."""
    path = (
        os.environ.get("STATECHARTS_CHROMIUM")
        or shutil.which("chromium")
        or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    )
    if not path:
        _skip_or_fail("Chromium is not installed")
    return str(path)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium per test module. Not per session: Playwright's sync API keeps an
    asyncio loop running in this thread while it is open, which would break `asyncio.run` in
    tests that come later (the worker runs async actors with it)."""
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        _skip_or_fail("the playwright package is not installed")
        raise
    path = chromium_path()
    with sync_playwright() as p:
        try:
            launched = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        except Error as exc:
            _skip_or_fail(f"Chromium at {path} did not start ({str(exc).splitlines()[0]})")
            raise
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser context (no cookies) and page, 1400 px wide."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(15_000)
    yield context.new_page()
    context.close()
