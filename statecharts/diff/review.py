"""The diff of every machine whose diagram a change redraws, for ``statecharts diagrams
--diff-base REV [--diff-out DIR]``: the text report of each on standard output and, in DIR,
``<stem>.md`` (a pull-request comment: the table and the marked Mermaid diagram) and
``<stem>.svg`` (the marked picture, when Graphviz is installed)."""

from __future__ import annotations

from pathlib import Path

from ..render import GraphvizNotFound, to_dot
from .compare import diff_machines
from .picture import diff_svg
from .report import markdown_report, text_report
from .revisions import machines_at, machines_now


def review(machines_dir: Path, rev: str, out_dir: Path | None = None) -> list[str]:
    """The report lines for each machine that differs from ``rev``, writing the Markdown and
    SVG files into ``out_dir`` when given."""
    before, after = machines_at(rev, machines_dir), machines_now(machines_dir)
    lines: list[str] = []
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    for stem in sorted(set(before) | set(after)):
        if stem not in after:
            lines.append(f"{stem}: machine removed since {rev}")
            continue
        if stem not in before:
            lines.append(f"{stem}: new machine since {rev}")
            continue
        diff = diff_machines(before[stem], after[stem])
        if diff.empty and to_dot(before[stem]) == to_dot(after[stem]):
            continue
        lines.extend(text_report(diff).rstrip("\n").split("\n"))
        if out_dir is not None:
            (out_dir / f"{stem}.md").write_text(markdown_report(diff), encoding="utf-8")
            try:
                (out_dir / f"{stem}.svg").write_text(diff_svg(diff), encoding="utf-8")
            except GraphvizNotFound:
                lines.append(f"  ({stem}.svg not drawn: Graphviz is not installed)")
    if not lines:
        lines.append(f"no machine differs from {rev}")
    return lines
