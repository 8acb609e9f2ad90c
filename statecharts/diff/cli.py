"""The ``diff`` command: ``statecharts diff OLD NEW``.

OLD and NEW are each ``MODULE:NAME``, a JSON/YAML machine file, or ``git:REV:PATH`` (a JSON/YAML
file as committed at REV, its path from the repository's top). ``--format`` is ``text`` (the
default), ``markdown`` (a table and the marked diagram in Mermaid, for a pull-request comment),
or the marked diagram as ``svg``, ``png``, ``dot`` or ``mermaid`` (the default for ``-o`` by its
suffix). ``--rename OLD_PATH=NEW_PATH`` says a state was renamed. ``--store URL`` adds what the
change does to the active runs in that store; the exit code is then 1 when deploying NEW would
strand runs (in removed states, with no migration that moves them). Errors exit 2.

The command line is where the layers meet: only ``--store`` reads ``persistence``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from statecharts.cli import run_one_tool

from ..errors import MachineDefinitionError
from ..render import GraphvizNotFound
from ..render.cli import write_output
from ..render.source import SourceError
from .changes import MachineDiff
from .compare import diff_machines
from .picture import diff_dot, diff_mermaid, diff_png, diff_svg
from .report import markdown_report, text_report
from .sources import load_machine_for_diff

DESCRIPTION = """\
What changed between two definitions of a machine: states, transitions, guards, actions,
timers, calls, retry policies and what a call's failure does.

OLD and NEW are each MODULE:NAME, a JSON/YAML machine file, or git:REV:PATH (a file as
committed at REV, its path from the repository's top). --format is text (the default),
markdown (a table and the marked diagram in Mermaid, for a pull-request comment), or the
marked diagram as svg, png, dot or mermaid (by default from the -o file's suffix).
--rename OLD_PATH=NEW_PATH says a state was renamed. --store URL adds what the change does
to the active runs in that store; the exit status is then 1 when deploying NEW would strand
runs (in removed states, with no migration that moves them). Errors exit 2."""

FORMATS = ("text", "markdown", "svg", "png", "dot", "mermaid")
_SUFFIX_FORMATS = {".md": "markdown", ".txt": "text", ".svg": "svg", ".png": "png",
                   ".dot": "dot", ".gv": "dot", ".mmd": "mermaid", ".mermaid": "mermaid"}
_DRAWINGS: dict[str, Callable[[MachineDiff], str | bytes]] = {
    "text": text_report, "markdown": markdown_report, "svg": diff_svg, "png": diff_png,
    "dot": diff_dot, "mermaid": diff_mermaid}


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``diff`` subcommand."""
    diff = subparsers.add_parser(
        "diff", help="what changed between two definitions of a machine (text, Markdown or a "
                     "marked diagram), and with --store what it does to running runs",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    diff.add_argument("old", help="MODULE:NAME, FILE.json/.yaml or git:REV:PATH")
    diff.add_argument("new", help="MODULE:NAME, FILE.json/.yaml or git:REV:PATH")
    diff.add_argument("--format", choices=FORMATS,
                      help="output format (default: from the -o suffix, else text)")
    diff.add_argument("-o", "--output", type=Path, help="output file (default: stdout)")
    diff.add_argument("--rename", action="append", default=[], metavar="OLD_PATH=NEW_PATH",
                      help="a state renamed (its path below the root); may be repeated")
    diff.add_argument("--store", help="a store URL: report the active runs the change affects "
                                      "(exit 1 when runs would be stranded)")
    diff.set_defaults(handler=_diff)


def _diff(args: argparse.Namespace) -> int:
    fmt = args.format or _SUFFIX_FORMATS.get(args.output.suffix if args.output else "", "text")
    try:
        renames = dict(_rename(item) for item in args.rename)
        changes = diff_machines(load_machine_for_diff(args.old), load_machine_for_diff(args.new),
                                renames)
        data = _DRAWINGS[fmt](changes)
    except (SourceError, MachineDefinitionError, GraphvizNotFound, OSError, ValueError) as exc:
        print(f"statecharts diff: {exc}", file=sys.stderr)
        return 2
    status = 0
    if args.store:
        from persistence.impact import impact_markdown, impact_text, store_impact
        from persistence.stores import StoreError, open_store

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
        status = 1 if impact.stranded else 0
    write_output(data, args.output)
    return status


def _rename(item: str) -> tuple[str, str]:
    old, sep, new = item.partition("=")
    if not sep or not old or not new:
        raise ValueError(f"--rename {item!r}: write OLD_PATH=NEW_PATH (e.g. "
                         "waiting=pending.waiting)")
    return old, new


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m statecharts.diff.cli ...``"""
    return run_one_tool(register, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
