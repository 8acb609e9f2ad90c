"""Fixtures for the telemetry tests."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.persistence.conftest import (  # noqa: F401  (fixtures, used by name)
    pg_dsn,
    pg_schema,
    store,
    store_factory,
    store_kind,
)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Subprocesses a test starts (append them): killed if still running when it ends."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)
