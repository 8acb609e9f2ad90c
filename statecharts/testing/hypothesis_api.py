"""The test kit's one import of Hypothesis. Without it (the ``testing`` extra not installed),
importing a kit module that needs it fails with an error naming the extra, instead of a bare
``No module named 'hypothesis'``; ``graph``, ``coverage`` and ``outcomes`` never import this."""

from __future__ import annotations

try:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st
    from hypothesis.stateful import (
        RuleBasedStateMachine,
        invariant,
        precondition,
        rule,
        run_state_machine_as_test,
    )
except ModuleNotFoundError as exc:
    if (exc.name or "").split(".")[0] != "hypothesis":
        raise
    raise ModuleNotFoundError(
        "statecharts' test kit (strategies, harness, properties, persistence.testing) needs "
        "Hypothesis, which the 'testing' extra installs: pip install 'statecharts[testing]' "
        "(graph, coverage and outcomes work without it)",
        name="hypothesis",
    ) from exc

__all__ = [
    "HealthCheck",
    "Phase",
    "RuleBasedStateMachine",
    "given",
    "invariant",
    "precondition",
    "rule",
    "run_state_machine_as_test",
    "settings",
    "st",
]
