"""Issue 44: importing a test-kit module that needs Hypothesis, without it, names the extra
(it was a bare ``ModuleNotFoundError: No module named 'hypothesis'``). The clean-venv test of
the core wheel checks the same where Hypothesis is really absent."""

from __future__ import annotations

import subprocess
import sys

import pytest

HIDE_HYPOTHESIS = "import sys; sys.modules['hypothesis'] = None; "


@pytest.mark.parametrize(
    "module",
    [
        "statecharts.testing.strategies",
        "statecharts.testing.harness",
        "statecharts.testing.properties",
        "persistence.testing",
    ],
)
def test_a_kit_module_without_hypothesis_names_the_testing_extra(module: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", HIDE_HYPOTHESIS + f"import {module}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        "ModuleNotFoundError: statecharts' test kit (strategies, harness, "
        "properties, persistence.testing) needs Hypothesis, which the 'testing' "
        "extra installs: pip install 'statecharts[testing]' (graph, coverage and "
        "outcomes work without it)"
    )


def test_graph_and_coverage_still_import_without_hypothesis() -> None:
    subprocess.run(
        [
            sys.executable,
            "-c",
            HIDE_HYPOTHESIS + "import statecharts.testing, "
            "statecharts.testing.graph, statecharts.testing.coverage",
        ],
        check=True,
        timeout=120,
    )
