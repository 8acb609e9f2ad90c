"""The ``statecharts`` command. Each tool adds its subcommands through ``register(subparsers)``
(the handler is stored as ``handler`` in the parser defaults)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .errors import MachineDefinitionError
from .loading import load_machine

COMMAND_MODULES = (
    "statecharts.render.cli",
    "statecharts.diff.cli",
    "statecharts.io.n8n.cli",
    "persistence.cli",
    "persistence.ui.cli",
)


def _validate(args: argparse.Namespace) -> int:
    status = 0
    for path in args.files:
        try:
            machine = load_machine(path)
        except MachineDefinitionError as exc:
            print(f"{path}: {exc}", file=sys.stderr)
            status = 1
        except OSError as exc:
            print(f"{path}: {exc}", file=sys.stderr)
            status = 1
        else:
            print(f"{path}: ok ({len(machine.definition.nodes)} states, fingerprint "
                  f"{machine.fingerprint})")
    return status


def build_parser() -> argparse.ArgumentParser:
    """The parser with every available subcommand."""
    parser = argparse.ArgumentParser(prog="statecharts", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    validate = commands.add_parser("validate", help="check machine files (JSON/YAML) and "
                                                    "list every problem with its path")
    validate.add_argument("files", nargs="+")
    validate.set_defaults(handler=_validate)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and name.startswith(exc.name):
                continue  # that tool is not part of this installation
            raise
        module.register(commands)
    return parser


def run_one_tool(register: Callable[[Any], None], argv: Sequence[str] | None,
                 doc: str | None = None) -> int:
    """Run a single tool's subcommands on their own (``python -m <tool module>``)."""
    parser = argparse.ArgumentParser(prog="statecharts", description=doc)
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.handler(args) or 0)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
