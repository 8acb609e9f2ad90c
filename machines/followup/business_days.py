"""Business-day arithmetic for follow-up cadences: weekends and listed holidays don't count."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import date, timedelta

DEFAULT_OFFSETS = (5, 12, 21)
MAX_OFFSET = 2_610
"""The largest cadence offset: ten years of business days. A follow-up further out is a typo,
and an offset like ``10**30`` would count days past ``date.max`` (an OverflowError at the first
watch, long after the cadence was loaded)."""


def offsets_problem(offsets: object) -> str | None:
    """Why ``offsets`` is not a cadence (a list of increasing positive integers, each at most
    ``MAX_OFFSET``), or None when it is one."""
    numbers = list(offsets) if isinstance(offsets, list | tuple) else []
    if (
        not numbers
        or not all(isinstance(o, int) and not isinstance(o, bool) and o > 0 for o in numbers)
        or numbers != sorted(set(numbers))
    ):
        return f"a list of increasing positive business-day offsets, not {offsets!r}"
    if numbers[-1] > MAX_OFFSET:
        return f"offsets are at most {MAX_OFFSET} business days (ten years), not {numbers[-1]}"
    return None


def is_business_day(day: date, holidays: Collection[date]) -> bool:
    """Monday to Friday and not a holiday."""
    return day.weekday() < 5 and day not in holidays


def add_business_days(start: date, days: int, holidays: Collection[date]) -> date:
    """The date ``days`` business days after ``start`` (``start`` itself never counts, so a
    deal opened on a Saturday is one business day old on Monday). ``days == 0`` is ``start``."""
    if days < 0:
        raise ValueError(f"days must be >= 0, not {days}")
    day = start
    remaining = days
    while remaining:
        day += timedelta(days=1)
        if is_business_day(day, holidays):
            remaining -= 1
    return day


def business_days_between(start: date, end: date, holidays: Collection[date]) -> int:
    """How many business days after ``start`` ``end`` is (0 if ``end <= start``)."""
    count = 0
    day = start
    while day < end:
        day += timedelta(days=1)
        if is_business_day(day, holidays):
            count += 1
    return count


def cadence_due_dates(
    opened_on: date, offsets: Sequence[int], holidays: Collection[date]
) -> list[date]:
    """The due date of each follow-up step: ``offsets`` business days after ``opened_on``."""
    problem = offsets_problem(offsets)
    if problem is not None:
        raise ValueError(f"cadence offsets: {problem}")
    return [add_business_days(opened_on, offset, holidays) for offset in offsets]


def week_of(day: date) -> tuple[date, date]:
    """Monday and Friday of the week ``day`` is in."""
    monday = day - timedelta(days=day.weekday())
    return monday, monday + timedelta(days=4)
