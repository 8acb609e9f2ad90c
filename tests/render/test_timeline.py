"""Engine events in words for the UI's timeline, with and without the run's definition."""

from __future__ import annotations

import pytest

from statecharts import Machine, create_machine
from statecharts.render.timeline import engine_event_phrase


def _machine() -> Machine:
    return create_machine(
        {
            "id": "renewal_strict",
            "initial": "charging_card",
            "states": {
                "charging_card": {
                    "invoke": {"src": "charge", "retry": {"max_attempts": 3}, "onDone": "waiting"}
                },
                "waiting": {
                    "after": {"300000": "done", "grace": "done"},
                    "invoke": {"id": "remind", "src": "send_reminder"},
                },
                "done": {"type": "final"},
            },
        },
        actors={"charge": lambda: None, "send_reminder": lambda: None},
        delays={"grace": 86_400_000},
    )


RETRY = (
    "xstate.after.retry:renewal_strict.charging_card.renewal_strict.charging_card.waiting_to_retry"
)


@pytest.mark.parametrize(
    ("event", "with_machine", "without"),
    [
        (RETRY, "retry wait over: Charging card", "retry wait over: Charging card"),
        (
            "xstate.after.300000.renewal_strict.waiting",
            "timer: after 5 minutes in Waiting",
            "timer: after 5 minutes",
        ),
        (
            "xstate.after.grace.renewal_strict.waiting",
            "timer: after the grace (1 day) in Waiting",
            "timer: after the grace",
        ),
        ("xstate.done.actor.remind", "send reminder succeeded", "remind succeeded"),
        (
            "xstate.error.actor.renewal_strict.charging_card:invocation[0]",
            "charge failed",
            "the call in Charging card failed",
        ),
        (
            "xstate.done.state.renewal_strict.charging_card",
            "Charging card finished",
            "Charging card finished",
        ),
        ("xstate.init", "started", "started"),
        ("statecharts.cancel", "cancelled", "cancelled"),
    ],
)
def test_engine_events_in_words(event: str, with_machine: str, without: str) -> None:
    assert engine_event_phrase(event, _machine()) == with_machine
    assert engine_event_phrase(event) == without


def test_events_sent_from_outside_keep_their_names() -> None:
    for event in ("PAY", "order.cancelled", "APPROVE"):
        assert engine_event_phrase(event, _machine()) is None
