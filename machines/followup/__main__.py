"""``python -m machines.followup migrate [--database URL]``: create or upgrade the follow-up
database (default: ``$FOLLOWUP_DATABASE``, else ``sqlite:///followup.db``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from machines.followup.db import Database, DatabaseError


def main(argv: Sequence[str] | None = None) -> int:
    """Apply the follow-up database's migrations; print what was applied."""
    parser = argparse.ArgumentParser(prog="python -m machines.followup", description=__doc__)
    parser.add_argument("command", choices=["migrate"])
    parser.add_argument("--database", default=os.environ.get("FOLLOWUP_DATABASE",
                                                             "sqlite:///followup.db"))
    args = parser.parse_args(argv)
    try:
        applied = Database(args.database).migrate()
    except (DatabaseError, ValueError) as exc:
        print(f"{args.database}: {exc}", file=sys.stderr)
        return 1
    print(f"{args.database}: " + (f"applied migration(s) {applied}" if applied else
                                  "already up to date"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
