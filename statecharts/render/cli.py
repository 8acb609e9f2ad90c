"""The ``render`` and ``diagrams`` commands.

``statecharts render MODULE:NAME|FILE.json|FILE.yaml [--format svg|png|dot|mermaid] [-o FILE]
[--snapshot SNAPSHOT.json]`` draws one machine (the format defaults to the output file's
suffix, else SVG; without ``-o`` it writes to standard output).

``statecharts diagrams [--check] [--machines DIR] [--out DIR]`` regenerates the diagrams folder
for every machine under ``machines/`` (see ``diagrams.py`` for the discovery convention), or
with ``--check`` lists the stale files and exits 1. The diff (``statecharts.diff.cli``) adds
``--diff-base REV [--diff-out DIR]`` to it in the ``statecharts`` command (the render never
imports the diff).

``statecharts/cli.py`` calls ``register(subparsers)``; each command stores its
handler as ``handler`` (``args.handler(args)`` returns the exit code). ``python -m
statecharts.render.cli`` runs the two commands on their own.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from statecharts.subcommands import run_one_tool

from ..errors import MachineDefinitionError, SnapshotError
from . import GraphvizNotFound, to_dot, to_mermaid, to_png, to_svg
from .diagrams import DiscoveryError, regenerate, stale_files
from .source import SourceError, load_machine_for_drawing

FORMATS = ("svg", "png", "dot", "mermaid")
_SUFFIX_FORMATS = {
    ".svg": "svg",
    ".png": "png",
    ".dot": "dot",
    ".gv": "dot",
    ".mmd": "mermaid",
    ".mermaid": "mermaid",
}


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``render`` and ``diagrams`` subcommands."""
    render = subparsers.add_parser(
        "render",
        help="draw one machine as SVG, PNG, DOT or Mermaid",
        description="Draw a machine: MODULE:NAME (a Machine object, or an entry of the "
        "module's MACHINES dict) or a .json / .yaml machine file.",
    )
    render.add_argument("target", help="MODULE:NAME, FILE.json or FILE.yaml")
    render.add_argument(
        "--format", choices=FORMATS, help="output format (default: from the -o suffix, else svg)"
    )
    render.add_argument("-o", "--output", type=Path, help="output file (default: stdout)")
    render.add_argument(
        "--snapshot",
        type=Path,
        help="a persisted snapshot (JSON) whose active states are highlighted",
    )
    render.set_defaults(handler=_render)
    diagrams = subparsers.add_parser(
        "diagrams",
        help="regenerate diagrams/ for every machine under machines/",
        description="Write an SVG and a Mermaid file per machine, and an index README.md.",
    )
    diagrams.add_argument(
        "--check",
        action="store_true",
        help="change nothing; list stale files and exit 1 if there are any",
    )
    diagrams.add_argument(
        "--machines",
        type=Path,
        default=Path("machines"),
        help="the machines package folder (default: machines)",
    )
    diagrams.add_argument(
        "--out", type=Path, default=Path("diagrams"), help="the diagrams folder (default: diagrams)"
    )
    diagrams.set_defaults(handler=_diagrams)


def _render(args: argparse.Namespace) -> int:
    fmt = args.format or _SUFFIX_FORMATS.get(args.output.suffix if args.output else "", "svg")
    try:
        machine = load_machine_for_drawing(args.target)
        snapshot = machine.restore(args.snapshot.read_bytes()) if args.snapshot else None
        data = _draw(fmt)(machine, snapshot)
    except (
        SourceError,
        MachineDefinitionError,
        SnapshotError,
        GraphvizNotFound,
        OSError,
        ValueError,
    ) as exc:
        print(f"statecharts render: {exc}", file=sys.stderr)
        return 2
    write_output(data, args.output)
    return 0


def write_output(data: str | bytes, output: Path | None) -> None:
    """Write a command's result to ``output``, or to standard output without one."""
    payload = data if isinstance(data, bytes) else data.encode()
    if output is None:
        sys.stdout.buffer.write(payload)
        sys.stdout.flush()
    else:
        output.write_bytes(payload)


def _draw(fmt: str) -> Callable[..., str | bytes]:
    drawers: dict[str, Callable[..., str | bytes]] = {
        "svg": to_svg,
        "png": to_png,
        "dot": to_dot,
        "mermaid": to_mermaid,
    }
    return drawers[fmt]


def _diagrams(args: argparse.Namespace) -> int:
    if not args.machines.is_dir():
        print(f"statecharts diagrams: {args.machines}: no such folder", file=sys.stderr)
        return 2
    try:
        if args.check:
            stale = stale_files(args.machines, args.out)
            for line in stale:
                print(f"{args.out / line}")
            if stale:
                print(
                    f"{len(stale)} stale file(s): run `statecharts diagrams` and commit "
                    f"{args.out}/",
                    file=sys.stderr,
                )
            return 1 if stale else 0
        changed = regenerate(args.machines, args.out)
    except (DiscoveryError, GraphvizNotFound) as exc:
        print(f"statecharts diagrams: {exc}", file=sys.stderr)
        return 2
    for name in changed:
        print(f"updated {args.out / name}")
    if not changed:
        print(f"{args.out}/ is up to date")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``render`` or ``diagrams`` without the main ``statecharts`` command."""
    return run_one_tool(register, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
