"""``statecharts diff OLD NEW --store URL``: the diff command, with what deploying NEW does to
the active runs in that store (``impact``). The exit code is then 1 when runs would be
stranded.

The diff is a tool below the runtime and imports nothing of it; the runtime adds this option
to the diff's command (``subcommands.registered``) when both are installed.
"""

from __future__ import annotations

import argparse
import sys

from persistence.impact import impact_markdown, impact_text, store_impact
from persistence.stores import StoreError, open_store
from statecharts.diff.cli import make_diff
from statecharts.render.cli import write_output
from statecharts.subcommands import registered


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``--store`` to the ``diff`` subcommand, when it is there."""
    found = registered(subparsers, "diff")
    if found is None:
        return
    diff, without_store = found
    diff.add_argument(
        "--store",
        help="a store URL: report the active runs the change affects "
        "(exit 1 when runs would be stranded)",
    )

    def diff_with_impact(args: argparse.Namespace) -> int:
        return _diff_with_impact(args) if args.store else without_store(args)

    diff.set_defaults(handler=diff_with_impact)


def _diff_with_impact(args: argparse.Namespace) -> int:
    made = make_diff(args)
    if isinstance(made, int):
        return made
    changes, data, fmt = made
    try:
        store = open_store(args.store, max_connections=2)
    except (StoreError, ValueError) as exc:
        print(f"statecharts diff: --store: {exc}", file=sys.stderr)
        return 2
    try:
        impact = store_impact(store, changes)
    finally:
        store.close()
    report = impact_markdown(impact) if fmt == "markdown" else impact_text(impact)
    if isinstance(data, str) and fmt in ("text", "markdown"):
        data += "\n" + report
    else:
        sys.stderr.write(report)
    write_output(data, args.output)
    return 1 if impact.stranded else 0
