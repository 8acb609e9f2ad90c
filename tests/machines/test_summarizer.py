"""The summarizer's prompt and parser."""

from __future__ import annotations

import pytest

from machines.followup.summarizer import (
    MAX_EMAILS,
    MAX_LINE,
    SummaryFormatError,
    build_prompt,
    parse_summary,
)


def email(n: int, body: str = "hello") -> dict[str, object]:
    return {"sent_at": n, "sender": f"s{n}@x", "subject": f"subject {n}", "body": body}


def test_prompt_names_the_deal_and_the_format() -> None:
    prompt = build_prompt("Acme", [email(2, "second"), email(1, "first")])
    assert "'Acme'" in prompt and "exactly two lines" in prompt
    assert prompt.index("first") < prompt.index("second"), "oldest first"
    assert "E-mail 2 from s2@x: subject 2" in prompt


def test_prompt_keeps_the_newest_emails_and_trims_bodies() -> None:
    prompt = build_prompt("Acme", [email(n, "word " * 500) for n in range(MAX_EMAILS + 5)])
    assert "subject 4" not in prompt and "subject 5" in prompt
    assert f"subject {MAX_EMAILS + 4}" in prompt
    assert max(len(line) for line in prompt.splitlines()) <= 600


@pytest.mark.parametrize(
    "answer",
    [
        "Deal waits on legal review.\nNext: Bob sends the contract.",
        "- Deal waits on legal review.\n- Next: Bob sends the contract.\n",
        "1. Deal waits on legal review.\n\n2) Next: Bob sends the contract.",
        "Line 1: Deal waits on legal review.\nLine 2: Next: Bob sends the contract.",
    ],
)
def test_parser_accepts_two_lines_in_common_shapes(answer: str) -> None:
    assert parse_summary(answer) == "Deal waits on legal review.\nNext: Bob sends the contract."


@pytest.mark.parametrize(
    "answer",
    [
        "",
        "Only one line.",
        "Sure! Here is the summary:\nLine one.\nLine two.",
        "one\n" + "x" * (MAX_LINE + 1),
    ],
)
def test_parser_rejects_anything_else(answer: str) -> None:
    with pytest.raises(SummaryFormatError):
        parse_summary(answer)
