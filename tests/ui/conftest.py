"""Fixtures for the operator UI tests: the persistence tests' real stores (SQLite files, a
PostgreSQL server), plus headless Chromium (see `browser.py`)."""

from __future__ import annotations

from tests.persistence.conftest import (  # noqa: F401  (fixtures, used by name)
    pg_dsn,
    pg_schema,
    store,
    store_factory,
    store_kind,
)
from tests.render.conftest import dot_installed  # noqa: F401  (fixture, used by name)
from tests.ui.browser import browser, page  # noqa: F401  (fixtures, used by name)
