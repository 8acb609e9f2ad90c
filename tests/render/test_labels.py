"""Readable words: names, guards, delays and retry policies as a reviewer reads them."""

from __future__ import annotations

import pytest

from statecharts import and_, create_machine, not_
from statecharts.guards import GuardSpec
from statecharts.render import to_dot, to_mermaid
from statecharts.render.labels import duration, event_phrase, guard_phrase, humanize, words
from statecharts.render.retries import retry_phrase
from statecharts.retry_policy import RetryPolicy

NBSP = "\u00a0"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("PAYMENT_RECEIVED", "payment received"),
        ("creating_invoice", "creating invoice"),
        ("sendHTTPRequest", "send HTTP request"),
        ("order-shipped", "order shipped"),
        ("retry2", "retry 2"),
    ],
)
def test_humanize(name: str, expected: str) -> None:
    assert humanize(name) == expected


def test_words_lowercase_shouting_names() -> None:
    assert words("API_CALL_FAILED") == ["api", "call", "failed"]


@pytest.mark.parametrize(
    ("guard", "expected"),
    [
        (GuardSpec("is_payment_valid"), "if the payment is valid"),
        (GuardSpec("isOrderLocked"), "if the order is locked"),
        (GuardSpec("is_ready"), "if it is ready"),
        (GuardSpec("is_within_limit", params={"limit": 3}), "if it is within limit (limit 3)"),
        (GuardSpec("has_items"), "if it has items"),
        (GuardSpec("payment_is_late"), "if the payment is late"),
        (GuardSpec("<lambda>"), "if a condition holds"),
        (
            GuardSpec("is_payment_valid", description="if the card was charged"),
            "if the card was charged",
        ),
    ],
)
def test_guard_phrases(guard: GuardSpec, expected: str) -> None:
    assert guard_phrase(guard) == expected


def test_guard_combinators() -> None:
    both = GuardSpec(
        "and",
        children=(GuardSpec("has_items"), GuardSpec("not", children=(GuardSpec("is_locked"),))),
    )
    assert guard_phrase(both) == "if it has items and not (it is locked)"
    assert (
        guard_phrase(GuardSpec("not", children=(GuardSpec("is_order_paid"),)))
        == "unless the order is paid"
    )
    either = GuardSpec("or", children=(GuardSpec("is_vip"), GuardSpec("stateIn", params="m.paid")))
    assert guard_phrase(either) == "if it is vip or in “paid”"


@pytest.mark.parametrize(
    ("ms", "long", "short"),
    [
        (300_000, "5 minutes", f"5{NBSP}min"),
        (1000, "1 second", f"1{NBSP}s"),
        (1500, "1.5 seconds", f"1.5{NBSP}s"),
        (90_000, "1 minute 30 seconds", f"1{NBSP}min 30{NBSP}s"),
        (172_800_000, "2 days", f"2{NBSP}d"),
        (250, "250 milliseconds", f"250{NBSP}ms"),
    ],
)
def test_durations(ms: int, long: str, short: str) -> None:
    assert duration(ms) == long
    assert duration(ms, short=True) == short


def test_event_phrases() -> None:
    assert event_phrase("*") == "any other event"
    assert event_phrase("order.*") == "any order event"


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (
            RetryPolicy(max_attempts=4, initial_interval=1000),
            ["retries up to 3 times,", "waiting 1 s, 2 s, 4 s"],
        ),
        (
            RetryPolicy(max_attempts=3, initial_interval=30_000, backoff="fixed"),
            ["retries up to 2 times,", "waiting 30 s between tries"],
        ),
        (
            RetryPolicy(max_attempts=5, initial_interval=2000, backoff="linear", max_interval=5000),
            ["retries up to 4 times,", "waiting 2 s, 4 s, 5 s, 5 s"],
        ),
        (
            RetryPolicy(max_attempts=9, initial_interval=500),
            ["retries up to 8 times,", "waiting 500 ms, 1 s, 2 s, 4 s, 8 s, …"],
        ),
        (
            RetryPolicy(
                max_attempts=2, initial_interval=60_000, jitter="full", total_timeout=3_600_000
            ),
            [
                "retries up to 1 time,",
                "waiting up to 1 min (random)",
                "gives up after 1 hour in all",
            ],
        ),
        (RetryPolicy(max_attempts=1), ["no retries"]),
    ],
)
def test_retry_phrases(policy: RetryPolicy, expected: list[str]) -> None:
    assert [line.replace(NBSP, " ") for line in retry_phrase(policy)] == expected


def test_states_keep_their_names_and_descriptions_go_below() -> None:
    machine = create_machine(
        {
            "id": "m",
            "initial": "a",
            "states": {
                "a": {
                    "description": "Waiting for the customer",
                    "on": {"GO": {"target": "b", "description": "Customer says go"}},
                },
                "b": {"invoke": {"src": "do_thing", "description": "ask the bank"}},
            },
        },
        actors={"do_thing": lambda: None},
    )
    mermaid = to_mermaid(machine)
    assert 'state "A" as s_a\n    s_a : Waiting for the customer\n' in mermaid
    dot = to_dot(machine)
    assert (
        '<FONT POINT-SIZE="12"><B>A</B></FONT><BR/><FONT POINT-SIZE="10" COLOR="#333333">'
        "Waiting for the customer</FONT>"
    ) in dot  # the name bold, the description smaller
    for text in (dot, mermaid):
        assert "Customer says go" in text
        assert "doing: ask the bank" in text and "do thing" not in text


def test_raw_names_never_appear_as_labels() -> None:
    machine = create_machine(
        {
            "id": "pay",
            "initial": "waiting",
            "states": {
                "waiting": {
                    "on": {"PAYMENT_RECEIVED": {"target": "paid", "guard": "is_payment_valid"}},
                    "after": {"300000": "expired"},
                    "always": {"target": "paid", "guard": and_("is_free", not_("is_blocked"))},
                },
                "paid": {"type": "final"},
                "expired": {"type": "final"},
            },
        },
        guards={
            "is_payment_valid": lambda c, e: True,
            "is_free": lambda c, e: False,
            "is_blocked": lambda c, e: False,
        },
    )
    mermaid = to_mermaid(machine)
    assert "payment received<br/>if the payment is valid" in mermaid
    assert "after 5 minutes" in mermaid
    assert "automatically<br/>if it is free and not (it is blocked)" in mermaid
    assert "is_payment_valid" not in mermaid and "PAYMENT_RECEIVED" not in mermaid
    dot = to_dot(machine)
    assert 'tooltip="PAYMENT_RECEIVED [is_payment_valid]"' in dot  # raw name: tooltip only
    assert "payment received<BR/>if the payment is valid" in dot


def test_a_guard_function_says_its_own_words_or_nothing() -> None:
    # guards.described: "" for bookkeeping the transitions' descriptions already tell (an
    # imported n8n workflow's "which node runs next"), drawn without "otherwise" after it
    from statecharts.guards import described

    def routes_to(context: object, event: object, node: str) -> bool:
        return node == "b"

    def is_paid(context: object, event: object) -> bool:
        return True

    machine = create_machine(
        {
            "id": "m",
            "initial": "a",
            "states": {
                "a": {
                    "on": {
                        "GO": [
                            {
                                "target": "b",
                                "guard": {"type": "routes_to", "params": {"node": "b"}},
                                "description": "true",
                            },
                            {
                                "target": "c",
                                "guard": {"type": "routes_to", "params": {"node": "c"}},
                                "description": "false",
                            },
                            {"target": "c", "description": "nothing goes on"},
                        ],
                        "PAY": [{"target": "b", "guard": "is_paid"}, {"target": "c"}],
                    }
                },
                "b": {},
                "c": {},
            },
        },
        guards={"routes_to": described(routes_to, ""), "is_paid": described(is_paid, "if paid")},
    )
    mermaid = to_mermaid(machine)
    assert "s_a --> s_b : true\n" in mermaid and "s_a --> s_c : false\n" in mermaid
    assert "s_a --> s_c : nothing goes on\n" in mermaid  # no "otherwise": no guard was said
    assert "s_a --> s_b : pay<br/>if paid\n" in mermaid
    assert "s_a --> s_c : pay<br/>otherwise\n" in mermaid
    assert "routes to" not in mermaid and "routes to" not in to_dot(machine)


@pytest.mark.parametrize(
    ("key", "description", "title"),
    [
        ("fetch_api_records", "Fetch API Records", "Fetch API Records"),
        ("splitinbatches", "SplitInBatches", "SplitInBatches"),  # the words run together
        ("set_2", "Set", "Set"),  # numbered to be unique
        ("n_2nd_try", "2nd try", "2nd try"),  # a leading digit guarded
        (
            "customer_messenger_send_message_to",
            "Customer Messenger - Send message to client",
            "Customer Messenger - Send message to client",
        ),  # cut short at a word
        ("paid", "Payment taken", "Paid"),  # a description, not the name: shown below
        ("pay_the_bill", "Pay the bill by card", "Pay the bill"),  # too few words to be a cut
    ],
)
def test_a_description_that_is_the_name_as_written_is_the_title(
    key: str, description: str, title: str
) -> None:
    machine = create_machine(
        {"id": "m", "initial": key, "states": {key: {"description": description}}}
    )
    assert f'state "{title}" as s_{key}\n' in to_mermaid(machine)
