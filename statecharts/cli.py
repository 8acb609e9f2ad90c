"""The ``statecharts`` command. Each tool adds its subcommands through ``register(subparsers)``
(the handler is stored as ``handler`` in the parser defaults). The top of the layers: nothing
imports this module; the tools share ``subcommands``."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from .errors import MachineDefinitionError
from .loading import load_machine
from .subcommands import importable_from_here, run_one_tool

COMMAND_MODULES = (
    "statecharts.render.cli",
    "statecharts.diff.cli",
    "statecharts.io.n8n.cli",
    "persistence.cli",
    "persistence.ui.cli",
    "persistence.impact_cli",
)
"""The tools' command modules, each with ``register(subparsers)``, in order: a later one may
add options to an earlier one's subcommand (``subcommands.registered``)."""

__all__ = ["COMMAND_MODULES", "build_parser", "main", "run_one_tool"]


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


DESCRIPTION = """\
XState-style statecharts for Python: check and draw workflow definitions, run them durably
with workers on SQLite or PostgreSQL, inspect and act on runs, serve the operator UI, and
import n8n workflows. `statecharts COMMAND --help` explains each command."""

EXAMPLES = """\
examples:
  statecharts validate workflows/order.json
  statecharts render myapp.workflows:order -o order.svg
  statecharts worker --store sqlite:///runs.db --machines myapp.workflows
  statecharts runs list --store sqlite:///runs.db --status error
  statecharts ui --store sqlite:///runs.db --machines myapp.workflows

The store URL can also come from $STATECHARTS_STORE."""


def build_parser() -> argparse.ArgumentParser:
    """The parser with every available subcommand."""
    parser = argparse.ArgumentParser(prog="statecharts", description=DESCRIPTION,
                                     epilog=EXAMPLES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     title="commands")
    validate = commands.add_parser(
        "validate", help="check machine files (JSON/YAML) and list every problem with its path",
        description="Load each machine file as the runtime would and report every problem "
                    "with its path in the file (for example states.cart.on.CHECKOUT.traget); "
                    "exit 1 if any file has one.")
    validate.add_argument("files", nargs="+", metavar="FILE",
                          help="a machine definition, .json or .yaml")
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    importable_from_here()
    args = build_parser().parse_args(argv)
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
