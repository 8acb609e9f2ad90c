"""``python -m machines.followup COMMAND [--database URL]`` (default: ``$FOLLOWUP_DATABASE``,
else ``sqlite:///followup.db``):

- ``migrate``: create or upgrade the follow-up database;
- ``holidays load FILE``: the holidays of a TOML file's ``[holidays]`` table;
- ``cadences load FILE``: the cadences of its ``[cadences]`` table
  (format: ``machines.followup.calendar_file``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from machines.followup.calendar_file import (
    CalendarFileError,
    load_cadences,
    load_holidays,
    read_calendar,
)
from machines.followup.db import Database, DatabaseError


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; print what it did (errors on stderr, exit status 1)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--database", default=os.environ.get("FOLLOWUP_DATABASE", "sqlite:///followup.db")
    )
    parser = argparse.ArgumentParser(
        prog="python -m machines.followup",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "migrate", parents=[common], help="create or upgrade the follow-up database"
    )
    for table in ("holidays", "cadences"):
        loading = commands.add_parser(
            table, parents=[common], help=f"load {table} from a TOML file"
        )
        loading.add_argument("action", choices=["load"])
        loading.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    try:
        db = Database(args.database)
        if args.command == "migrate":
            applied = db.migrate()
            print(
                f"{args.database}: "
                + (f"applied migration(s) {applied}" if applied else "already up to date")
            )
            return 0
        calendar = read_calendar(args.file)
        loader = load_holidays if args.command == "holidays" else load_cadences
        print(f"{args.database}: loaded {loader(db, calendar)} {args.command} from {args.file}")
        return 0
    except (DatabaseError, CalendarFileError, ValueError) as exc:
        print(f"{args.database}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
