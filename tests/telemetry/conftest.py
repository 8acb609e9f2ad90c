"""Fixtures for the telemetry tests."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Subprocesses a test starts (append them): killed if still running when it ends."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)
