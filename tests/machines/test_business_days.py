"""Business-day arithmetic behind the follow-up cadence."""

from __future__ import annotations

from datetime import date

import pytest
from hypothesis import given
from hypothesis import strategies as st

from machines.followup.business_days import (
    DEFAULT_OFFSETS,
    add_business_days,
    business_days_between,
    cadence_due_dates,
    is_business_day,
    week_of,
)

FRIDAY = date(2026, 3, 6)
GOOD_FRIDAY = date(2026, 4, 3)
EASTER_MONDAY = date(2026, 4, 6)


def test_weekends_do_not_count() -> None:
    assert add_business_days(FRIDAY, 1, ()) == date(2026, 3, 9)  # Monday
    assert add_business_days(date(2026, 3, 7), 1, ()) == date(2026, 3, 9)  # from Saturday
    assert add_business_days(date(2026, 3, 2), 5, ()) == date(2026, 3, 9)


def test_holidays_do_not_count() -> None:
    holidays = {GOOD_FRIDAY, EASTER_MONDAY}
    assert add_business_days(date(2026, 4, 2), 1, holidays) == date(2026, 4, 7)
    assert not is_business_day(GOOD_FRIDAY, holidays)
    assert is_business_day(GOOD_FRIDAY, ())


def test_default_cadence_from_a_monday() -> None:
    assert cadence_due_dates(date(2026, 3, 2), DEFAULT_OFFSETS, ()) == [
        date(2026, 3, 9),
        date(2026, 3, 18),
        date(2026, 3, 31),
    ]


def test_cadence_moves_past_holidays() -> None:
    plain = cadence_due_dates(date(2026, 3, 23), DEFAULT_OFFSETS, ())
    with_easter = cadence_due_dates(
        date(2026, 3, 23), DEFAULT_OFFSETS, {GOOD_FRIDAY, EASTER_MONDAY}
    )
    assert plain == [date(2026, 3, 30), date(2026, 4, 8), date(2026, 4, 21)]
    assert with_easter == [date(2026, 3, 30), date(2026, 4, 10), date(2026, 4, 23)]


def test_bad_offsets_are_refused() -> None:
    with pytest.raises(ValueError, match="increasing positive"):
        cadence_due_dates(date(2026, 3, 2), (12, 5), ())
    with pytest.raises(ValueError, match=">= 0"):
        add_business_days(date(2026, 3, 2), -1, ())


def test_an_offset_past_ten_years_is_refused_before_counting_towards_date_max() -> None:
    with pytest.raises(ValueError, match="at most 2610 business days"):
        cadence_due_dates(date(2026, 3, 2), (5, 10**30), ())


def test_week_of_gives_monday_and_friday() -> None:
    assert week_of(date(2026, 3, 4)) == (date(2026, 3, 2), date(2026, 3, 6))
    assert week_of(date(2026, 3, 8)) == (date(2026, 3, 2), date(2026, 3, 6))


@given(
    start=st.dates(date(2020, 1, 1), date(2030, 1, 1)),
    days=st.integers(0, 60),
    holidays=st.sets(st.dates(date(2020, 1, 1), date(2030, 3, 1)), max_size=20),
)
def test_adding_then_counting_business_days_round_trips(
    start: date, days: int, holidays: set[date]
) -> None:
    end = add_business_days(start, days, holidays)
    assert business_days_between(start, end, holidays) == days
    if days:
        assert is_business_day(end, holidays)
