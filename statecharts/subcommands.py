"""What every tool's command-line module shares: running its subcommands on their own
(``python -m <tool>.cli``), and adding options to a subcommand another tool registered.

The ``statecharts`` command (``cli.py``) gathers every tool's subcommands; the tools import
this module, never ``cli.py``, so the command sits above the tools and nothing imports it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

Handler = Callable[[argparse.Namespace], int]


def run_one_tool(
    register: Callable[[Any], None], argv: Sequence[str] | None, doc: str | None = None
) -> int:
    """Run a single tool's subcommands on their own (``python -m <tool module>``)."""
    importable_from_here()
    parser = argparse.ArgumentParser(prog="statecharts", description=doc)
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.handler(args) or 0)


def importable_from_here() -> None:
    """Let ``--machines myapp`` and ``render myapp:machine`` import modules from the current
    folder, as ``python -m`` would (an installed console script does not put it on the
    path)."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def registered(
    subparsers: argparse._SubParsersAction,  # type: ignore[type-arg]
    name: str,
) -> tuple[argparse.ArgumentParser, Handler] | None:
    """The parser and handler of the subcommand ``name`` a tool below registered, for a tool
    above to add options to (``diagrams --diff-base``: the diff; ``diff --store``: the
    stores); None when that tool is not part of this installation or this command line."""
    parser = subparsers.choices.get(name)
    if parser is None:
        return None
    return parser, parser.get_default("handler")
