"""The hidden-state report of one import (Markdown) and the summary over many workflows."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .importer import N8nImport
from .mapping import HIDDEN_KINDS, MachineImport


def write_report(result: N8nImport, diagram: str | None = None) -> str:
    """``<name>_report.md``: node count against state count, every hidden state with the node
    it came from and why, where each node went, and the warnings. ``diagram`` (Mermaid source)
    is embedded when given."""
    lines = [f"# n8n import: {result.name}", ""]
    lines += [
        f"- **{result.node_count} nodes** on the canvas"
        + (
            f" (plus {result.sticky_notes} sticky notes, which are comments)"
            if result.sticky_notes
            else ""
        ),
        f"- **{result.state_count} states** in machine `{result.primary.machine_id}`, of which "
        f"**{len(result.hidden_states)} hidden states**: things n8n does without a node "
        "on the canvas",
    ]
    if result.error_machine is not None:
        lines.append(
            f"- error machine `{result.error_machine.machine_id}`: "
            f"{result.error_machine.state_count} states, "
            f"{len(result.error_machine.hidden_states)} hidden, started when a run "
            "of a workflow watched by this Error Trigger fails"
        )
    if result.error_workflow_id is not None:
        lines.append(
            f"- `settings.errorWorkflow`: when a run fails, n8n starts workflow "
            f"`{result.error_workflow_id}` (import it separately; its Error Trigger "
            "becomes a separate error machine)"
        )
    for machine in result.machines:
        lines += _hidden_section(machine)
    lines += [
        "",
        "## Where each node went",
        "",
        "| node | type | state | how |",
        "|---|---|---|---|",
    ]
    for mapping in result.nodes:
        state = f"`{mapping.state}`" if mapping.state else "-"
        lines.append(
            f"| {_cell(mapping.node)} | `{mapping.type}` | {state} | {_cell(mapping.how)} |"
        )
    lines += [
        "",
        "## What you must decide",
        "",
        "The machine runs the nodes in n8n's order and hands each the items n8n would; "
        "an output with no items stops its branch, as in n8n. These are the places "
        "where the statechart and n8n can still differ, or where n8n's behaviour is "
        "now yours to choose:",
        "",
    ]
    expressions = _expression_nodes(result)
    if expressions:
        lines.append(
            f"- n8n expressions are copied verbatim, not evaluated, in "
            f"{len(expressions)} node(s) ({', '.join(expressions[:8])}"
            + (", ..." if len(expressions) > 8 else "")
            + "): the stubs compute them"
        )
    lines += [f"- {_cell(d)}" for d in result.decisions]
    if not expressions and not result.decisions:
        lines.append("- nothing beyond writing the stubs")
    impls = [i for i in result.implementations if not i.provided]
    lines += [
        "",
        "## To implement",
        "",
        f"{len(impls)} named implementations, stubbed in the `_impl.py` skeleton:",
        "",
    ]
    for impl in impls:
        lines.append(f"- {impl.kind} `{impl.name}`: {impl.doc}")
    lines += ["", "## Diagram", ""]
    if diagram is not None:
        lines += ["```mermaid", diagram.rstrip("\n"), "```"]
    else:
        lines.append("Not drawn: this installation has no diagram renderer (statecharts.render).")
    if result.warnings:
        lines += ["", "## Warnings", ""] + [f"- {_cell(w)}" for w in result.warnings]
    return "\n".join(lines) + "\n"


def _expression_nodes(result: N8nImport) -> list[str]:
    """Nodes whose state meta names a node with ``={{ ... }}`` parameters (from the report's
    mapping: the parameters themselves are never copied)."""
    return [m.node for m in result.nodes if m.node in result.expression_nodes]


def _hidden_section(machine: MachineImport) -> list[str]:
    lines = ["", f"## Hidden states of `{machine.machine_id}`", ""]
    counts = machine.hidden_counts()
    if not counts:
        return [*lines, "None."]
    lines += [
        ", ".join(f"{HIDDEN_KINDS[kind]}: {count}" for kind, count in counts.items()),
        "",
        "| hidden state | kind | from node | why it exists |",
        "|---|---|---|---|",
    ]
    for hidden in machine.hidden_states:
        node = _cell(hidden.node) if hidden.node else "(whole workflow)"
        lines.append(f"| `{hidden.state}` | {hidden.kind} | {node} | {_cell(hidden.reason)} |")
    return lines


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


@dataclass(frozen=True)
class SummaryRow:
    """One workflow in a summary: its file, node and state counts, hidden states per kind."""

    file: str
    nodes: int
    states: int
    hidden: dict[str, int]
    error_machine: bool
    error: str | None = None


def summary_rows(results: Iterable[tuple[str, N8nImport | str]]) -> list[SummaryRow]:
    """Rows for (file name, import result or error message) pairs."""
    rows = []
    for file, result in results:
        if isinstance(result, str):
            rows.append(SummaryRow(file, 0, 0, {}, False, result))
        else:
            rows.append(
                SummaryRow(
                    file,
                    result.node_count,
                    result.state_count,
                    result.primary.hidden_counts(),
                    result.error_machine is not None,
                )
            )
    return rows


def format_summary(rows: list[SummaryRow]) -> str:
    """A plain-text table: one line per workflow, then totals and hidden states per kind."""
    kinds = list(HIDDEN_KINDS)
    header = ["workflow", "nodes", "states", "hidden", *kinds, "error machine"]
    table = [header]
    for row in rows:
        if row.error is not None:
            table.append([row.file, "-", "-", "-", *["-"] * len(kinds), f"ERROR: {row.error}"])
            continue
        table.append(
            [
                row.file,
                str(row.nodes),
                str(row.states),
                str(sum(row.hidden.values())),
                *[str(row.hidden.get(k, 0)) for k in kinds],
                "yes" if row.error_machine else "",
            ]
        )
    good = [r for r in rows if r.error is None]
    table.append(
        [
            "TOTAL",
            str(sum(r.nodes for r in good)),
            str(sum(r.states for r in good)),
            str(sum(sum(r.hidden.values()) for r in good)),
            *[str(sum(r.hidden.get(k, 0) for r in good)) for k in kinds],
            str(sum(r.error_machine for r in good)),
        ]
    )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    text = [
        "  ".join(
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i])
            for i, cell in enumerate(line)
        ).rstrip()
        for line in table
    ]
    legend = [f"  {kind}: {meaning}" for kind, meaning in HIDDEN_KINDS.items()]
    failed = len(rows) - len(good)
    totals = (
        f"{len(good)} workflows imported"
        + (f", {failed} failed" if failed else "")
        + f": {sum(r.nodes for r in good)} nodes became "
        f"{sum(r.states for r in good)} states"
    )
    return "\n".join([*text, "", totals, "", "hidden-state kinds:", *legend]) + "\n"
