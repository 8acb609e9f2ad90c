"""The ``diff`` command: ``statecharts diff OLD NEW``.

OLD and NEW are each ``MODULE:NAME``, a JSON/YAML machine file, or ``git:REV:PATH`` (a JSON/YAML
file as committed at REV, its path from the repository's top). ``--format`` is ``text`` (the
default), ``markdown`` (a table and the marked diagram in Mermaid, for a pull-request comment),
or the marked diagram as ``svg``, ``png``, ``dot`` or ``mermaid`` (the default for ``-o`` by its
suffix). ``--rename OLD_PATH=NEW_PATH`` says a state was renamed. ``--store URL`` (there when
the durable runtime is installed) adds what the change does to the active runs in that store;
the exit code is then 1 when deploying NEW would strand runs (in removed states, with no
migration that moves them). Errors exit 2.
"""

# The layers: the diff imports the render, never the reverse, so this module adds
# ``--diff-base REV [--diff-out DIR]`` to the render's ``diagrams`` command; and it imports
# nothing of ``persistence``, which adds ``--store`` here (``persistence.impact_cli``).

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from statecharts.subcommands import registered, run_one_tool

from ..errors import MachineDefinitionError
from ..render import GraphvizNotFound
from ..render.cli import write_output
from ..render.diagrams import DiscoveryError
from ..render.source import SourceError
from .changes import MachineDiff
from .compare import diff_machines
from .picture import diff_dot, diff_mermaid, diff_png, diff_svg
from .report import markdown_report, text_report
from .review import review
from .sources import load_machine_for_diff

DESCRIPTION = """\
What changed between two definitions of a machine: states, transitions, guards, actions,
timers, calls, retry policies and what a call's failure does.

OLD and NEW are each MODULE:NAME, a JSON/YAML machine file, or git:REV:PATH (a file as
committed at REV, its path from the repository's top). --format is text (the default),
markdown (a table and the marked diagram in Mermaid, for a pull-request comment), or the
marked diagram as svg, png, dot or mermaid (by default from the -o file's suffix).
--rename OLD_PATH=NEW_PATH says a state was renamed. --store URL (there when the durable
runtime is installed) adds what the change does to the active runs in that store; the exit
status is then 1 when deploying NEW would strand runs (in removed states, with no migration
that moves them). Errors exit 2."""

FORMATS = ("text", "markdown", "svg", "png", "dot", "mermaid")
_SUFFIX_FORMATS = {
    ".md": "markdown",
    ".txt": "text",
    ".svg": "svg",
    ".png": "png",
    ".dot": "dot",
    ".gv": "dot",
    ".mmd": "mermaid",
    ".mermaid": "mermaid",
}
_DRAWINGS: dict[str, Callable[[MachineDiff], str | bytes]] = {
    "text": text_report,
    "markdown": markdown_report,
    "svg": diff_svg,
    "png": diff_png,
    "dot": diff_dot,
    "mermaid": diff_mermaid,
}


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``diff`` subcommand."""
    diff = subparsers.add_parser(
        "diff",
        help="what changed between two definitions of a machine (text, Markdown or a "
        "marked diagram)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    diff.add_argument("old", help="MODULE:NAME, FILE.json/.yaml or git:REV:PATH")
    diff.add_argument("new", help="MODULE:NAME, FILE.json/.yaml or git:REV:PATH")
    diff.add_argument(
        "--format", choices=FORMATS, help="output format (default: from the -o suffix, else text)"
    )
    diff.add_argument("-o", "--output", type=Path, help="output file (default: stdout)")
    diff.add_argument(
        "--rename",
        action="append",
        default=[],
        metavar="OLD_PATH=NEW_PATH",
        help="a state renamed (its path below the root); may be repeated",
    )
    diff.set_defaults(handler=_diff)
    _add_review(subparsers)


def _diff(args: argparse.Namespace) -> int:
    made = make_diff(args)
    if isinstance(made, int):
        return made
    write_output(made[1], args.output)
    return 0


def make_diff(args: argparse.Namespace) -> tuple[MachineDiff, str | bytes, str] | int:
    """The ``diff`` command's changes, its output in the format asked for, and that format;
    or the exit status 2 after printing why there is none."""
    fmt = args.format or _SUFFIX_FORMATS.get(args.output.suffix if args.output else "", "text")
    try:
        renames = dict(_rename(item) for item in args.rename)
        changes = diff_machines(
            load_machine_for_diff(args.old), load_machine_for_diff(args.new), renames
        )
        return changes, _DRAWINGS[fmt](changes), fmt
    except (SourceError, MachineDefinitionError, GraphvizNotFound, OSError, ValueError) as exc:
        print(f"statecharts diff: {exc}", file=sys.stderr)
        return 2


def _add_review(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``diagrams --diff-base REV [--diff-out DIR]``, when the render's ``diagrams`` is there."""
    found = registered(subparsers, "diagrams")
    if found is None:
        return
    diagrams, draw = found
    diagrams.add_argument(
        "--diff-base",
        metavar="REV",
        help="also print the diff of every machine that differs from its "
        "definition at git revision REV (e.g. origin/main)",
    )
    diagrams.add_argument(
        "--diff-out",
        type=Path,
        metavar="DIR",
        help="with --diff-base: write <machine>.md and <machine>.svg there",
    )

    def diagrams_with_review(args: argparse.Namespace) -> int:
        if args.diff_base and args.machines.is_dir():  # (the render says when it is not)
            try:
                for line in review(args.machines, args.diff_base, args.diff_out):
                    print(line)
            except (DiscoveryError, SourceError) as exc:
                print(f"statecharts diagrams: --diff-base: {exc}", file=sys.stderr)
                return 2
        return draw(args)

    diagrams.set_defaults(handler=diagrams_with_review)


def _rename(item: str) -> tuple[str, str]:
    old, sep, new = item.partition("=")
    if not sep or not old or not new:
        raise ValueError(
            f"--rename {item!r}: write OLD_PATH=NEW_PATH (e.g. waiting=pending.waiting)"
        )
    return old, new


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m statecharts.diff.cli ...``"""
    return run_one_tool(register, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
