"""The picture in docs/diagrams.md ("Reviewing a change"), drawn from the test pair.

Regenerate after a renderer or diff change (needs Graphviz), then review and commit:

    .venv/bin/python -m tests.diff.doc_image
"""

from __future__ import annotations

from pathlib import Path

from statecharts.diff import diff_machines
from statecharts.diff.changes import MachineDiff
from tests.diff.pairs import BASE, edited, machine, reviewed_change

PICTURE = Path(__file__).resolve().parents[2] / "docs" / "img" / "order-change.svg"


def reviewed() -> MachineDiff:
    """The order workflow before and after ``reviewed_change``."""
    return diff_machines(machine(BASE), machine(edited(reviewed_change)))


def main() -> None:
    """Write the picture."""
    from statecharts.diff.picture import diff_svg

    PICTURE.write_text(diff_svg(reviewed()), encoding="utf-8")
    print(f"wrote {PICTURE}")


if __name__ == "__main__":
    main()
