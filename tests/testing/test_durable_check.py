"""The durable model-based check: it passes on a correct runtime and machine, and fails, with
the story, when the durable run and the pure engine disagree."""

from __future__ import annotations

import contextlib
import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from persistence import outbox
from persistence.testing import DurableMismatch, assert_durable_matches
from statecharts import assign, create_machine, from_callable

from .example_machines import subscription_machine

ROOT = Path(__file__).resolve().parents[2]
OUTPUTS = {"fetchAccount": [1], "chargeCard": [{"charge_id": "ch-1"}], "sendReceipt": ["m"]}


def test_a_correct_workflow_matches_across_crashes() -> None:
    assert_durable_matches(subscription_machine(), outputs=OUTPUTS, max_examples=15)


def test_a_guard_reading_global_state_is_caught() -> None:
    # a guard with a hidden counter: the model and the worker each evaluate it once, and see
    # different values (as a guard reading a clock, a file or a module global would)
    counter = itertools.count()
    machine = create_machine(
        {
            "id": "flaky",
            "initial": "checking",
            "states": {
                "checking": {
                    "invoke": {
                        "id": "check",
                        "src": "check",
                        "onDone": [
                            {"guard": "firstTime", "target": "approved"},
                            {"target": "denied"},
                        ],
                    }
                },
                "approved": {"type": "final"},
                "denied": {"type": "final"},
            },
        },
        guards={"firstTime": lambda ctx, ev: next(counter) % 2 == 0},
        actors={"check": from_callable(lambda input: True, "check")},
    )
    with pytest.raises(DurableMismatch) as caught:
        assert_durable_matches(machine, outputs={"check": [True]}, crashes=False)
    assert "durable state 'denied', pure 'approved'" in str(caught.value)
    assert "story: xstate.done.actor.check {'output': True}" in str(caught.value)


def test_a_runtime_that_runs_a_call_twice_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = outbox._call

    def twice(fn: Any, args: Any, kwargs: Any, key: str, outbox_key: str) -> Any:
        if getattr(fn, "__name__", "") == "chargeCard":
            with contextlib.suppress(Exception):  # the second run is what we check
                real(fn, args, kwargs, key, outbox_key)
        return real(fn, args, kwargs, key, outbox_key)

    monkeypatch.setattr(outbox, "_call", twice)
    with pytest.raises(DurableMismatch, match=r"calls executed .*'chargeCard'.*'chargeCard'"):
        assert_durable_matches(subscription_machine(), outputs=OUTPUTS)


def test_the_pure_kit_never_imports_persistence() -> None:
    code = (
        "import sys; import statecharts.testing, statecharts.testing.graph, "
        "statecharts.testing.harness, statecharts.testing.properties, "
        "statecharts.testing.strategies, statecharts.testing.outcomes; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'persistence'))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.strip() == "[]"


def test_events_and_deadlines_during_a_call_are_checked_against_the_model() -> None:
    """Stories send events and let deadlines pass while a call runs (calls take time), and the
    durable run must agree with the model at every step: a runtime that held the run for the
    whole call (applying the deadline or the events only after the call's result) fails here."""
    during: list[str] = []
    machine = create_machine(
        {
            "id": "deadline",
            "initial": "charging",
            "context": {"pings": 0},
            "states": {
                "charging": {
                    "invoke": {
                        "id": "charge",
                        "src": "charge",
                        "onDone": "paid",
                        "onError": "failed",
                    },
                    "after": {"1000": "timed_out"},
                    "on": {
                        "PING": {
                            "actions": ["noted", assign({"pings": lambda c, e: c["pings"] + 1})]
                        }
                    },
                },
                "paid": {"type": "final"},
                "failed": {"type": "final"},
                "timed_out": {"type": "final"},
            },
        },
        actions={"noted": lambda ctx, ev: during.append("ping")},
        actors={"charge": from_callable(lambda input: "ok", "charge")},
    )
    assert_durable_matches(machine, outputs={"charge": ["ok"]}, max_examples=20)
    assert during, "no story sent an event while the call ran"
