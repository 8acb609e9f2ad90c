"""The text of the morning list and the Friday digest."""

from __future__ import annotations

from datetime import date

from machines.followup.digest import Closed, FollowUp, digest_text, morning_list_text

MONDAY = date(2026, 3, 9)


def test_morning_list_orders_by_lateness_and_shows_summaries() -> None:
    text = morning_list_text(
        MONDAY,
        [
            FollowUp("Globex", 1, 3, MONDAY, task_id="T-2"),
            FollowUp("acme", 2, 3, date(2026, 3, 5), summary="Asked for a discount.\nCall Bob."),
        ],
    )
    assert text == (
        "Follow-ups for Monday 9 March 2026 (2)\n"
        "\n"
        "- acme: step 2 of 3, 2 business days overdue\n"
        "    Asked for a discount.\n"
        "    Call Bob.\n"
        "- Globex: step 1 of 3, due today [task T-2]"
    )


def test_overdue_counts_business_days_and_holidays() -> None:
    friday = date(2026, 3, 6)
    item = FollowUp("Acme", 1, 3, friday)
    assert "1 business day overdue" in morning_list_text(MONDAY, [item])
    assert "due 6 Mar" in morning_list_text(MONDAY, [item], holidays={MONDAY})


def test_empty_morning_list_says_so() -> None:
    assert morning_list_text(MONDAY, []) == "No follow-ups due on Monday 9 March 2026."


def test_digest_lists_the_week() -> None:
    friday = date(2026, 3, 13)
    text = digest_text(
        friday,
        fired=[FollowUp("Initech", 1, 3, date(2026, 3, 10), task_id="T-4")],
        opened=["Umbrella", "acme"],
        closed=[Closed("Globex", "won")],
        upcoming=[FollowUp("Initech", 2, 3, date(2026, 3, 19))],
    )
    assert text == (
        "Follow-up digest for the week of 9 Mar to 13 Mar 2026\n"
        "\n"
        "Tasks created: 1\n"
        "- Initech: step 1 of 3, due 10 Mar [task T-4]\n"
        "Deals newly watched: 2 (acme, Umbrella)\n"
        "Watches closed: 1 (Globex: won)\n"
        "Due next week: 1\n"
        "- Initech: step 2 of 3, due 19 Mar"
    )


def test_quiet_week_digest() -> None:
    text = digest_text(date(2026, 3, 13), [], [], [], [])
    assert "Tasks created: 0" in text and "Watches closed: 0" in text
    assert "Deals newly watched: 0\n" in text
