"""Machine diffs for review: what changed between two definitions of a machine, in words
(text for a terminal or CI log, Markdown for a pull request) and as a picture of the new
machine with the changes marked.

>>> from statecharts.diff import diff_machines, text_report
>>> changes = diff_machines(old_machine, new_machine)
>>> print(text_report(changes))

The same two definitions always give the same report and the same picture.
"""

from __future__ import annotations

from .changes import ADDED, CHANGED, REMOVED, Change, MachineDiff
from .compare import diff_machines

__all__ = ["ADDED", "CHANGED", "REMOVED", "Change", "MachineDiff", "diff_machines"]
