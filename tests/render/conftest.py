"""Shared fixtures for the diagram tests: the real ``dot`` program, or a loud skip (a failure
under CI=true, where Graphviz must be installed)."""

from __future__ import annotations

import os
import shutil

import pytest


@pytest.fixture
def dot_installed() -> str:
    """The path of Graphviz's ``dot``; skips loudly without it, fails under CI."""
    found = shutil.which("dot")
    if found is None:
        message = (
            "Graphviz 'dot' is not installed: SVG/PNG tests cannot run "
            "(apt-get install graphviz / brew install graphviz; scripts/system-deps.sh)"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found
