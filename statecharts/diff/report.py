"""A machine diff in words: plain text for a terminal or a CI log, Markdown for a pull-request
comment (a table, then the marked diagram as Mermaid, which GitHub and GitLab draw)."""

from __future__ import annotations

from .changes import ADDED, CHANGED, REMOVED, MachineDiff
from .picture import diff_mermaid

_SIGNS = {ADDED: "+", REMOVED: "-", CHANGED: "~"}
_MARK_WORDS = {ADDED: "🟢 added", REMOVED: "🔴 removed", CHANGED: "🟠 changed"}
WORKFLOW = "(workflow)"


def headline(diff: MachineDiff) -> str:
    """One line: which machine, how many changes of each kind, the fingerprints."""
    old, new = diff.old, diff.new
    if diff.empty:
        same = (
            "same fingerprint"
            if old.fingerprint == new.fingerprint
            else "fingerprints differ only in what a diff does "
            "not show (action parameters, outputs)"
        )
        return f"{new.id}: no changes ({same})"
    counts = diff.counts()
    return (
        f"{new.id}: {counts[ADDED]} added, {counts[REMOVED]} removed, "
        f"{counts[CHANGED]} changed (fingerprint {old.fingerprint[:12]} → "
        f"{new.fingerprint[:12]})"
    )


def text_report(diff: MachineDiff) -> str:
    """The diff for a terminal: a headline, then one line per change, ``+`` added, ``-``
    removed, ``~`` changed, each with the state it concerns."""
    lines = [headline(diff)]
    lines += [f"  {_SIGNS[c.mark]} {c.where or WORKFLOW}: {c.text}" for c in diff.changes]
    return "\n".join(lines) + "\n"


def markdown_report(diff: MachineDiff, *, diagram: bool = True) -> str:
    """The diff for a pull request: a table of changes and (``diagram``) the new machine in
    Mermaid with the changes marked."""
    out = [f"### `{diff.new.id}`", "", _md(headline(diff)), ""]
    if not diff.empty:
        out += ["| | State | Change |", "|---|---|---|"]
        out += [
            f"| {_MARK_WORDS[c.mark]} | {_md(f'`{c.where}`' if c.where else WORKFLOW)} | "
            f"{_md(c.text)} |"
            for c in diff.changes
        ]
        out.append("")
        if diagram:
            out += [
                "<details open><summary>The new machine, changes marked</summary>",
                "",
                "```mermaid",
                diff_mermaid(diff).rstrip("\n"),
                "```",
                "",
                "</details>",
                "",
            ]
    return "\n".join(out)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
