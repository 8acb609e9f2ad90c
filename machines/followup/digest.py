"""The text of the reports: the morning list and the Friday digest (pure functions).

Both use the subject name stored on the watch, so they read well while the CRM is down, and
show a deal's two-line summary when Enrich has written one.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import date

from machines.followup.business_days import business_days_between


@dataclass(frozen=True)
class FollowUp:
    """One follow-up step of a watched deal."""

    subject_name: str
    step: int
    steps: int
    due_on: date
    task_id: str | None = None
    summary: str | None = None


@dataclass(frozen=True)
class Closed:
    """A watch closed during the week."""

    subject_name: str
    reason: str


def long_date(day: date) -> str:
    """``Monday 2 March 2026``."""
    return f"{day:%A} {day.day} {day:%B %Y}"


def short_date(day: date) -> str:
    """``2 Mar``."""
    return f"{day.day} {day:%b}"


def _lateness(item: FollowUp, today: date, holidays: Collection[date]) -> str:
    if item.due_on >= today:
        return "due today" if item.due_on == today else f"due {short_date(item.due_on)}"
    late = business_days_between(item.due_on, today, holidays)
    if late == 0:
        return f"due {short_date(item.due_on)}"
    return f"{late} business day{'s' if late != 1 else ''} overdue"


def _line(item: FollowUp, note: str) -> list[str]:
    task = f" [task {item.task_id}]" if item.task_id else ""
    lines = [f"- {item.subject_name}: step {item.step} of {item.steps}, {note}{task}"]
    if item.summary:
        lines += [f"    {part}" for part in item.summary.splitlines() if part.strip()]
    return lines


def morning_list_text(today: date, due: Sequence[FollowUp], holidays: Collection[date] = ()) -> str:
    """The morning list: every open follow-up due today or overdue, most overdue first."""
    if not due:
        return f"No follow-ups due on {long_date(today)}."
    ordered = sorted(due, key=lambda f: (f.due_on, f.subject_name.casefold(), f.step))
    lines = [f"Follow-ups for {long_date(today)} ({len(ordered)})", ""]
    for item in ordered:
        lines += _line(item, _lateness(item, today, holidays))
    return "\n".join(lines)


def digest_text(
    friday: date,
    fired: Sequence[FollowUp],
    opened: Sequence[str],
    closed: Sequence[Closed],
    upcoming: Sequence[FollowUp],
) -> str:
    """The Friday digest: the week's tasks, watches opened and closed, and next week's steps."""
    monday = date.fromordinal(friday.toordinal() - friday.weekday())
    lines = [
        f"Follow-up digest for the week of {short_date(monday)} to {short_date(friday)} "
        f"{friday.year}",
        "",
    ]
    lines.append(f"Tasks created: {len(fired)}")
    for item in sorted(fired, key=lambda f: (f.due_on, f.subject_name.casefold())):
        lines += _line(item, f"due {short_date(item.due_on)}")
    lines.append(
        f"Deals newly watched: {len(opened)}"
        + (f" ({', '.join(sorted(opened, key=str.casefold))})" if opened else "")
    )
    lines.append(
        f"Watches closed: {len(closed)}"
        + (
            " ("
            + ", ".join(
                f"{c.subject_name}: {c.reason}"
                for c in sorted(closed, key=lambda c: c.subject_name)
            )
            + ")"
            if closed
            else ""
        )
    )
    lines.append(f"Due next week: {len(upcoming)}")
    for item in sorted(upcoming, key=lambda f: (f.due_on, f.subject_name.casefold())):
        lines += _line(item, f"due {short_date(item.due_on)}")
    return "\n".join(lines)
