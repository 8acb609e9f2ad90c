"""A year's holidays and the cadences, from a TOML file the team keeps beside the config.

```toml
[holidays]
2026-04-03 = "Good Friday"
2026-12-25 = "Christmas Day"

[cadences]
default = [5, 12, 21]   # business days after the watch opened (at most 2,610: ten years)
```

``python -m machines.followup holidays load FILE`` and ``... cadences load FILE`` write them to
the follow-up database (upserts, in one transaction: a bad entry loads nothing). Errors name
the file and the offending key.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from machines.followup import repository
from machines.followup.business_days import offsets_problem
from machines.followup.db import Database


class CalendarFileError(ValueError):
    """The file cannot be read, or an entry is not a holiday or a cadence."""


@dataclass(frozen=True)
class CalendarFile:
    """Holidays (day -> name) and cadences (name -> business-day offsets) read from a file."""

    holidays: Mapping[date, str]
    cadences: Mapping[str, tuple[int, ...]]


def read_calendar(path: Path) -> CalendarFile:
    """Parse and check ``path``; ``CalendarFileError`` names the bad key."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise CalendarFileError(f"{path}: {exc}") from exc
    unknown = sorted(set(data) - {"holidays", "cadences"})
    if unknown:
        raise CalendarFileError(
            f"{path}: unknown table(s) {unknown}; expected [holidays] and/or [cadences]"
        )
    return CalendarFile(
        _holidays(path, data.get("holidays", {})), _cadences(path, data.get("cadences", {}))
    )


def _table(path: Path, name: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise CalendarFileError(f"{path}: [{name}] must be a table")
    return value


def _holidays(path: Path, value: Any) -> dict[date, str]:
    found: dict[date, str] = {}
    for key, name in _table(path, "holidays", value).items():
        try:
            day = key if isinstance(key, date) else date.fromisoformat(str(key))
        except ValueError as exc:
            raise CalendarFileError(f"{path}: holidays.{key}: not a date (yyyy-mm-dd)") from exc
        if not isinstance(name, str) or not name.strip():
            raise CalendarFileError(
                f"{path}: holidays.{key}: the holiday's name is a non-empty string"
            )
        found[day] = name.strip()
    return found


def _cadences(path: Path, value: Any) -> dict[str, tuple[int, ...]]:
    found: dict[str, tuple[int, ...]] = {}
    for name, offsets in _table(path, "cadences", value).items():
        problem = offsets_problem(offsets)
        if problem is not None:
            raise CalendarFileError(f"{path}: cadences.{name}: {problem}")
        found[str(name)] = tuple(offsets)
    return found


def load_holidays(db: Database, calendar: CalendarFile) -> int:
    """Write the file's holidays; how many."""
    with db.transaction() as tx:
        for day, name in sorted(calendar.holidays.items()):
            repository.add_holiday(tx, day, name)
    return len(calendar.holidays)


def load_cadences(db: Database, calendar: CalendarFile) -> int:
    """Write the file's cadences (new watches use them; running ones keep their dates)."""
    with db.transaction() as tx:
        for name, offsets in sorted(calendar.cadences.items()):
            tx.execute(
                "insert into cadences (name, offsets) values (?, ?) on conflict (name) "
                "do update set offsets = excluded.offsets",
                (name, json.dumps(offsets)),
            )
    return len(calendar.cadences)
