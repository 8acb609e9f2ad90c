"""The error for a test-kit module imported without Hypothesis: it names the extra to install,
instead of a bare ``No module named 'hypothesis'``."""

from __future__ import annotations


def hypothesis_missing(module: str, exc: ModuleNotFoundError) -> ModuleNotFoundError:
    """``exc`` reworded when it is Hypothesis that is missing (else ``exc`` itself)."""
    if (exc.name or "").split(".")[0] != "hypothesis":
        return exc
    return ModuleNotFoundError(
        f"{module} needs Hypothesis, which the 'testing' extra installs: "
        "pip install 'statecharts[testing]' (graph, coverage and outcomes work without it)",
        name="hypothesis")
