"""The kit sees past invoked work: call outcomes, retries and timers are part of every story,
so a workflow is tested end to end, not vacuously (issue 23)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecharts import assign, create_machine, from_callable
from statecharts.testing.graph import explore
from statecharts.testing.harness import InvariantViolation, replay, run_machine_test
from statecharts.testing.outcomes import (
    ExplorationCutOff,
    ExplorationWarning,
    error_event,
    error_names,
    running_calls,
)
from statecharts.testing.properties import (
    PropertyViolation,
    assert_error_paths_reachable,
    assert_no_deadlock,
    assert_properties,
    assert_retries_bounded,
)
from statecharts.testing.strategies import reachable_snapshots, stories

from .example_machines import subscription_machine

DONE_FETCH, DONE_CHARGE = "xstate.done.actor.fetch_account", "xstate.done.actor.charge"


def _quietly(check: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a check with default settings, which warn that calls completed with the
    placeholder output (no outputs= given): that warning is expected here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExplorationWarning)
        return check(*args, **kwargs)


def test_a_wrong_second_step_fails_the_default_properties() -> None:
    _quietly(assert_properties, subscription_machine())  # the right machine passes
    with pytest.raises(PropertyViolation) as caught:
        _quietly(assert_properties, subscription_machine("lost_receipt"))
    assert caught.value.property == "no deadlock"
    assert caught.value.event_types == [DONE_FETCH, DONE_CHARGE]
    assert "state 'awaiting_receipt' with context {'charges': 1} is not final" in str(caught.value)


def test_without_call_outcomes_nothing_past_the_first_call_exists() -> None:
    # what the kit saw before issue 23: one state, and the bug two calls later out of sight
    broken = subscription_machine("lost_receipt")
    before = explore(broken, invokes=False).coverage()
    assert before.format().splitlines()[0] == "machine 'subscription': states 1/8, transitions 0/8"
    now = _quietly(explore, broken).coverage()
    assert now.unreached_states == ("emailing", "subscribed")  # the bug, in plain sight
    with pytest.raises(PropertyViolation, match="'awaiting_receipt'"):
        _quietly(assert_no_deadlock, broken)


def test_a_wrong_second_step_fails_the_harness_with_default_settings() -> None:
    with pytest.warns(ExplorationWarning, match="invoke 'charge'"):  # placeholder outputs
        run_machine_test(subscription_machine(), invariants={"": lambda ctx: ctx["charges"] <= 1})
    with pytest.raises(InvariantViolation) as caught:
        _quietly(
            run_machine_test,
            subscription_machine("charge_again"),
            invariants={"": lambda ctx: ctx["charges"] <= 1},
        )
    assert caught.value.event_types == [DONE_FETCH, DONE_CHARGE]
    assert "context {'charges': 2}" in str(caught.value)
    final = replay(subscription_machine("charge_again"), caught.value.events)
    assert final is not None and final.context["charges"] == 2  # the story replays


def test_every_declared_error_and_the_retry_exhaustion_are_explored() -> None:
    machine = subscription_machine()
    graph = _quietly(explore, machine)
    charge = next(
        c for s in graph.states.values() for c in running_calls(machine, s) if c.id == "charge"
    )
    assert error_names(machine, charge) == ("Error", "CardDeclined")
    # a declined card fails at once; a generic error waits, retries once, then gives up
    failures = [
        (graph.states[e.source], e.segment)
        for e in graph.edges
        if e.segment.event["type"] == "xstate.error.actor.charge"
    ]
    outcomes = sorted(
        (
            before.retries["subscription.charging"]["attempt"],
            segment.event["error"]["name"],
            str(segment.state.value),
        )
        for before, segment in failures
    )
    assert outcomes == [
        (1, "CardDeclined", "failed"),
        (1, "Error", "{'charging': 'waiting_to_retry'}"),
        (2, "CardDeclined", "failed"),
        (2, "Error", "failed"),
    ]
    waits = [e for e in graph.edges if e.segment.timer is not None]
    assert [e.segment.describe() for e in waits] == [
        "(timer) xstate.after.retry:subscription.charging.subscription.charging.waiting_to_retry"
    ]
    assert graph.times[waits[0].target] == 1000  # the simulated clock moved by the wait
    _quietly(assert_error_paths_reachable, machine)
    _quietly(assert_retries_bounded, machine)


def test_outputs_drive_guards_past_a_call() -> None:
    machine = create_machine(
        {
            "id": "quote",
            "context": {"price": None},
            "initial": "pricing",
            "states": {
                "pricing": {
                    "invoke": {
                        "id": "price",
                        "src": "getPrice",
                        "onDone": [
                            {"guard": "free", "target": "free"},
                            {"target": "paid", "actions": "remember"},
                        ],
                    }
                },
                "free": {"type": "final"},
                "paid": {"type": "final"},
            },
        },
        guards={"free": lambda ctx, ev: ev["output"] == 0},
        actions={"remember": assign({"price": lambda ctx, ev: ev["output"]})},
        actors={"getPrice": from_callable(lambda input: 0, "getPrice")},
    )
    report = explore(machine, outputs={"getPrice": [0, 25]}).coverage()
    assert report.complete, report.format()
    with pytest.warns(
        ExplorationWarning,
        match=r"invoke 'price' \(src 'getPrice'\) in state "
        r"'quote.pricing' has no outputs given; it completed with None",
    ):
        explore(machine)
    with pytest.raises(ExplorationCutOff, match="invoke 'price'"):
        explore(machine, on_cutoff="error")
    with pytest.raises(ValueError, match=r"outputs for \['getprice'\]"):
        explore(machine, outputs={"getprice": [0]})


def test_a_step_that_only_fails_is_given_no_outputs() -> None:
    machine = subscription_machine()
    graph = explore(machine, outputs={"fetchAccount": [], "chargeCard": [1], "sendReceipt": [1]})
    assert {str(s.value) for s in graph.states.values()} == {"fetching_account", "failed"}


def test_a_retry_deadline_that_cuts_attempts_short_is_reported() -> None:
    def machine(deadline: int) -> Any:
        return create_machine(
            {
                "id": "sync",
                "initial": "calling",
                "states": {
                    "calling": {
                        "after": {deadline: "timed_out"},
                        "invoke": {
                            "id": "call",
                            "src": "callApi",
                            "retry": {
                                "max_attempts": 4,
                                "initial_interval": 1000,
                                "backoff": "fixed",
                            },
                            "onDone": "ok",
                            "onError": "failed",
                        },
                    },
                    "ok": {"type": "final"},
                    "failed": {"type": "final"},
                    "timed_out": {"type": "final"},
                },
            },
            actors={"callApi": from_callable(lambda input: None, "callApi")},
        )

    _quietly(assert_retries_bounded, machine(10_000))
    with pytest.raises(
        PropertyViolation,
        match="state 'calling': its policy allows 4 attempts but no story made more than 2",
    ):
        _quietly(assert_retries_bounded, machine(1500))


def test_an_error_path_no_declared_error_reaches_is_named() -> None:
    def build() -> Any:
        return create_machine(
            {
                "id": "upload",
                "initial": "sending",
                "states": {
                    "sending": {
                        "invoke": {
                            "id": "send",
                            "src": "upload",
                            "onDone": "sent",
                            "onError": [
                                {"guard": "tooLarge", "target": "rejected"},
                                {"target": "failed"},
                            ],
                        }
                    },
                    "sent": {"type": "final"},
                    "rejected": {"type": "final"},
                    "failed": {"type": "final"},
                },
            },
            guards={"tooLarge": lambda ctx, ev: ev["error"]["name"] == "PayloadTooLarge"},
            actors={"upload": from_callable(lambda input: None, "upload")},
        )

    with pytest.raises(
        PropertyViolation,
        match=r"never taken: states.sending.invoke."
        r"onError\[0\]",
    ):
        _quietly(assert_error_paths_reachable, build())
    _quietly(assert_error_paths_reachable, build(), errors={"upload": ["PayloadTooLarge"]})


def test_input_reaches_every_entry_point() -> None:
    machine = create_machine(
        {
            "id": "gate",
            "context": lambda input: {"vip": bool(input and input.get("vip"))},
            "initial": "deciding",
            "states": {
                "deciding": {"always": [{"guard": "vip", "target": "lounge"}, {"target": "queue"}]},
                "lounge": {"type": "final"},
                "queue": {"type": "final"},
            },
        },
        guards={"vip": lambda ctx, ev: ctx["vip"]},
    )
    assert explore(machine, input={"vip": True}).coverage().states_reached >= {"lounge"}
    assert_properties(machine, inputs=[{"vip": True}, {"vip": False}])
    with pytest.raises(PropertyViolation, match="never active: queue"):
        assert_properties(machine, "all_states_reachable", input={"vip": True})
    run_machine_test(
        machine, input={"vip": True}, max_examples=5, invariants={"queue": lambda ctx: False}
    )  # never in queue with VIP input
    with pytest.raises(InvariantViolation):
        run_machine_test(
            machine, input={"vip": False}, max_examples=5, invariants={"queue": lambda ctx: False}
        )


SUBSCRIPTION = subscription_machine()


@settings(max_examples=50, deadline=None, database=None)
@given(stories(SUBSCRIPTION, outputs={"fetchAccount": [1], "chargeCard": [1], "sendReceipt": [1]}))
def test_stories_are_replayable(story: Any) -> None:
    final = replay(SUBSCRIPTION, story.events)
    assert final is not None and final == story.final


def test_reachable_snapshots_get_past_the_first_call() -> None:
    seen: set[str] = set()

    @settings(max_examples=100, deadline=None, database=None, derandomize=True)
    @given(
        reachable_snapshots(
            subscription_machine(),
            max_steps=8,
            outputs={"fetchAccount": st.just(1), "chargeCard": [1], "sendReceipt": [1]},
        )
    )
    def collect(snapshot: Any) -> None:
        seen.add(str(snapshot.value))

    collect()
    assert {"subscribed", "failed", "{'charging': 'waiting_to_retry'}"} <= seen


def test_an_outcome_for_a_call_not_running_makes_a_story_impossible() -> None:
    machine = subscription_machine()
    assert replay(machine, [error_event("email", "Error")]) is None


def _failure_final_machine(declared: bool = True) -> Any:
    """A charge whose decline ends in a failure final (``failure`` is lane 16's key)."""
    declined: dict[str, Any] = {"type": "final"}
    if declared:
        declined["failure"] = "card declined"
    return create_machine(
        {
            "id": "declines",
            "initial": "charging",
            "states": {
                "charging": {
                    "invoke": {
                        "id": "charge",
                        "src": "charge",
                        "onDone": "paid",
                        "onError": "declined",
                    }
                },
                "paid": {"type": "final"},
                "declined": declined,
            },
        },
        actors={"charge": from_callable(lambda input: None, "charge")},
    )


def test_a_run_ending_done_in_a_declared_failure_is_reported() -> None:
    from statecharts.testing.properties import assert_no_done_through_failure

    # an engine that ignores the declaration (the key written into the config after the
    # definition was built): reaching `declined` ends the run done, which the property reports
    machine = _failure_final_machine(declared=False)
    machine.config["states"]["declined"]["failure"] = "card declined"
    with pytest.raises(
        PropertyViolation, match="the run ended done in failure state 'declined'"
    ) as caught:
        _quietly(assert_no_done_through_failure, machine)
    assert caught.value.event_types == ["xstate.error.actor.charge"]


def test_no_run_ends_done_through_a_failure_final() -> None:
    from statecharts import MachineDefinitionError
    from statecharts.testing.properties import assert_no_done_through_failure

    try:
        machine = _failure_final_machine()
    except MachineDefinitionError as exc:
        pytest.skip(f"pending issue 16 (failure finals) on main: {exc}")
    # with failure finals in the engine a decline ends the run as an error: the property
    # holds, and the decline counts as a final for final_always_reachable
    _quietly(assert_no_done_through_failure, machine)
    _quietly(assert_properties, machine, "final_always_reachable")
