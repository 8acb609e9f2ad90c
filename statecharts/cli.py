"""The ``statecharts`` command. Each tool adds its subcommands through ``register(subparsers)``
(the handler is stored as ``handler`` in the parser defaults). The top of the layers: nothing
imports this module; the tools share ``subcommands``."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from .definition import Implementations
from .errors import MachineDefinitionError, MissingImplementation
from .loading import read_config
from .subcommands import importable_from_here, run_one_tool
from .validation import check_config

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
    provided = _implementations_by_id(args.machines) if args.machines else None
    status = 0
    for path in args.files:
        try:
            status = max(status, _validate_one(path, provided))
        except MachineDefinitionError as exc:
            print(f"{path}: {exc}", file=sys.stderr)
            status = 1
        except OSError as exc:
            print(f"{path}: {exc}", file=sys.stderr)
            status = 1
    return status


def _validate_one(path: str, provided: dict[str, Implementations] | None) -> int:
    config = read_config(path)
    implementations = None
    if provided is not None:
        machine_id = config.get("id", "machine") if isinstance(config, dict) else None
        implementations = provided.get(str(machine_id))
        if implementations is None:
            print(
                f"{path}: --machines has no machine with id {machine_id!r} (it has: "
                f"{', '.join(sorted(provided)) or 'none'})",
                file=sys.stderr,
            )
            return 1
    checked = check_config(config, implementations)
    states = len(checked.machine.definition.nodes)
    if implementations is not None:
        print(
            f"{path}: ok ({states} states, implementations from --machines, fingerprint "
            f"{checked.machine.fingerprint})"
        )
    elif not checked.expected:
        print(f"{path}: ok ({states} states, fingerprint {checked.machine.fingerprint})")
    else:
        print(
            f"{path}: ok ({states} states); the code must provide "
            f"({len(checked.expected)}, check with --machines MODULE):"
        )
        for line in _expected_lines(checked.expected):
            print(f"  {line}")
    return 0


def _expected_lines(expected: Sequence[MissingImplementation]) -> list[str]:
    """One line per kind and name, with every path that names it."""
    paths: dict[tuple[str, str], list[str]] = {}
    for item in expected:
        paths.setdefault((item.kind, item.name), []).append(item.path)
    return [f"{kind} {name!r} at {', '.join(where)}" for (kind, name), where in paths.items()]


def _implementations_by_id(specs: Sequence[str]) -> dict[str, Implementations]:
    """The implementations of each machine in ``--machines`` modules, by machine id."""
    from persistence.cli import load_machines  # the module loader the runtime commands use

    return {m.definition.machine_id: m.implementations for m in load_machines(specs)}


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
    parser = argparse.ArgumentParser(
        prog="statecharts",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", title="commands"
    )
    validate = commands.add_parser(
        "validate",
        help="check machine files (JSON/YAML) and list every problem with its path",
        description="Check each machine file's structure and report every problem with its "
        "path in the file (for example states.cart.on.CHECKOUT.traget); exit 1 if "
        "any file has one. The guards, actions, actors and delays a file names are "
        "listed as what the code must provide (not problems); with --machines they "
        "are checked against the code: the machine with the file's id must provide "
        "every one.",
    )
    validate.add_argument(
        "files", nargs="+", metavar="FILE", help="a machine definition, .json or .yaml"
    )
    validate.add_argument(
        "--machines",
        action="append",
        metavar="MODULE",
        help="module[:attribute] with the Machines that implement the files "
        "(as for `statecharts worker`); repeatable",
    )
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
