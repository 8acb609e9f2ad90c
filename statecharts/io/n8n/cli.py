"""``statecharts n8n import WORKFLOW.json -o DIR`` and ``statecharts n8n summary DIR``.

``register(subparsers)`` adds the ``n8n`` command to the main CLI; ``main(argv)`` runs it on
its own (``python -m statecharts.io.n8n.cli ...``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from statecharts.errors import MachineDefinitionError
from statecharts.machine import Machine
from statecharts.subcommands import run_one_tool

from .importer import N8nImport, from_n8n
from .naming import snake
from .report import format_summary, summary_rows, write_report
from .skeleton import write_skeleton
from .validation import build_machines
from .workflow import N8nFormatError


class ImportFailed(Exception):
    """A workflow file could not be read or imported; the message says why and where."""


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``n8n import`` and ``n8n summary`` to the main CLI's subcommands."""
    parser = subparsers.add_parser(
        "n8n",
        help="import n8n workflows as statecharts",
        description="Import n8n workflow exports as statecharts.",
    )
    commands = parser.add_subparsers(dest="n8n_command", required=True)
    importing = commands.add_parser(
        "import",
        help="write the config, skeleton, hidden-state report and diagram",
        description="Import one n8n workflow export: writes <name>.json (config), "
        "<name>_impl.py (skeleton), <name>_report.md (hidden states) and the "
        "diagram into the output folder.",
    )
    importing.add_argument("workflow", type=Path, help="the n8n workflow export (JSON)")
    importing.add_argument(
        "-o", "--output", type=Path, required=True, help="folder to write into (created if missing)"
    )
    importing.add_argument("--name", help="machine and file name (default: the file name)")
    importing.set_defaults(handler=run_import)
    summary = commands.add_parser(
        "summary",
        help="nodes vs states and hidden states per kind over a folder",
        description="Import every *.json workflow in a folder (nothing is written) and print "
        "nodes against states and the hidden states of each kind.",
    )
    summary.add_argument("folder", type=Path, help="folder of n8n workflow exports")
    summary.set_defaults(handler=run_summary)


def run_import(args: argparse.Namespace) -> int:
    """``n8n import``: write the files, print their paths; 2 on a bad workflow file."""
    try:
        written = import_file(args.workflow, args.output, args.name)
    except ImportFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0


def run_summary(args: argparse.Namespace) -> int:
    """``n8n summary``: print the table; 1 when a workflow failed to import, 2 on a bad
    folder."""
    folder: Path = args.folder
    if not folder.is_dir():
        print(f"error: {folder}: not a folder", file=sys.stderr)
        return 2
    files = sorted(folder.glob("*.json"))
    if not files:
        print(f"error: {folder}: no *.json workflow files", file=sys.stderr)
        return 2
    results: list[tuple[str, N8nImport | str]] = []
    for file in files:
        try:
            results.append((file.name, _import(file, None)[0]))
        except ImportFailed as exc:
            results.append((file.name, str(exc)))
    rows = summary_rows(results)
    print(format_summary(rows), end="")
    return 1 if any(row.error for row in rows) else 0


def import_file(workflow: Path, output: Path, name: str | None = None) -> list[Path]:
    """Import ``workflow`` and write its files into ``output``; the written paths."""
    result, primary, error = _import(workflow, name)
    files: dict[str, str] = {f"{result.name}.json": _json(result.config)}
    error_file = None
    if result.error_config is not None:
        error_file = f"{result.name}_error.json"
        files[error_file] = _json(result.error_config)
    files[f"{result.name}_impl.py"] = write_skeleton(result, f"{result.name}.json", error_file)
    render = _renderer()
    diagram = None
    if render is not None:
        machines = [(result.name, primary)] + ([(f"{result.name}_error", error)] if error else [])
        for stem, machine in machines:
            files[f"{stem}.mmd"] = str(render.to_mermaid(machine))
            drawn, note = draw_svg(render, machine, f"{stem}.svg")
            if drawn is not None:
                files[f"{stem}.svg"] = drawn
            if note:
                print(note, file=sys.stderr)
        diagram = files[f"{result.name}.mmd"]
    files[f"{result.name}_report.md"] = write_report(result, diagram)
    written = []
    try:
        output.mkdir(parents=True, exist_ok=True)
        for file_name, text in files.items():
            path = output / file_name
            path.write_text(text, encoding="utf-8")
            written.append(path)
    except OSError as exc:
        raise ImportFailed(f"{output}: cannot write: {exc.strerror or exc}") from exc
    return written


def _import(workflow: Path, name: str | None) -> tuple[N8nImport, Machine, Machine | None]:
    """Read, import and validate ``workflow`` (the machines built by the engine)."""
    try:
        data = json.loads(workflow.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ImportFailed(f"{workflow}: cannot read: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ImportFailed(f"{workflow}: not valid JSON: {exc}") from exc
    try:
        result = from_n8n(data, name or snake(workflow.stem, "workflow"))
        primary, error = build_machines(result)
    except N8nFormatError as exc:
        raise ImportFailed(f"{workflow}: {exc}") from exc
    except MachineDefinitionError as exc:  # a bug in the importer, said plainly
        raise ImportFailed(f"{workflow}: the generated config is invalid: {exc}") from exc
    return result, primary, error


DOT_SECONDS = 60.0  # one Graphviz layout; a larger graph is drawn the simpler way
# simpler layouts, tried in turn when dot fails on a diagram (Graphviz 2.43, the version
# Debian installs, stops with "trouble in init_rank" on some clustered graphs, whatever
# its rank options): dot on the chart in one strip (no columns: their clusters and the
# arrows between them are what it trips on), then neato, which places the states without
# ranks or clusters
FALLBACK_LAYOUTS: tuple[tuple[str, ...], ...] = (("-Kneato", "-Goverlap=false"),)


def draw_svg(render: Any, machine: Machine, name: str) -> tuple[str | None, str | None]:
    """The SVG of ``machine`` and a note for the user: dot's own layout, else (dot failed or
    ran past ``DOT_SECONDS``) dot on the chart in one column, else the first of
    ``FALLBACK_LAYOUTS`` that renders, else no SVG. Drawing never stops an import: every
    other file is written either way."""
    wrapped, strip = render.to_dot(machine), render.to_dot(machine, columns=False)
    return svg_of_dot(render, wrapped, name, [] if strip == wrapped else [strip])


def svg_of_dot(
    render: Any, source: str, name: str, strips: Sequence[str] = ()
) -> tuple[str | None, str | None]:
    """``draw_svg`` for the DOT text ``source`` (the diagram file ``name``), with ``strips``
    the same chart in one column."""
    try:
        return str(render.graphviz.svg(source, timeout=DOT_SECONDS)), None
    except render.GraphvizNotFound as exc:  # the Mermaid diagram is still written
        return None, f"note: no SVG diagram: {exc}"
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        failure = _first_line(exc)
    simpler = [(strip, (), "in one column") for strip in strips] + [
        (source, layout, "with the simpler layout " + " ".join(layout))
        for layout in FALLBACK_LAYOUTS
    ]
    for text, layout, how in simpler:
        try:
            drawn = str(render.graphviz.svg(text, layout, timeout=DOT_SECONDS))
        except (RuntimeError, subprocess.TimeoutExpired):
            continue
        return drawn, (
            f"warning: {name}: Graphviz could not lay the diagram out ({failure}); "
            f"drawn {how} instead"
        )
    return None, (
        f"warning: {name}: not written, Graphviz could not lay the diagram out "
        f"({failure}), nor with a simpler layout; every other file is written"
    )


def _first_line(exc: Exception) -> str:
    if isinstance(exc, subprocess.TimeoutExpired):
        return f"dot ran past {DOT_SECONDS:g} s"
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    said = next((line for line in lines if "Error" in line), lines[0] if lines else "")
    return said.split("): ", 1)[-1] if said.startswith("dot failed") else said or type(exc).__name__


def _json(config: dict[str, Any]) -> str:
    return json.dumps(config, indent=2, ensure_ascii=False) + "\n"


def _renderer() -> Any:
    """The diagram renderer (``statecharts.render``: ``to_mermaid``, ``to_svg``), or None when
    this installation has none."""
    try:
        return importlib.import_module("statecharts.render")
    except ModuleNotFoundError as exc:
        if exc.name in ("statecharts.render",):
            return None
        raise


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``n8n`` command on its own."""
    return run_one_tool(register, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
