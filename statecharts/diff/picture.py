"""The picture of a machine diff: the new machine's diagram with the changes marked.

Added states and arrows are green; removed ones are drawn back in, dashed red, where they were
(inside the nearest state that is still there); changed ones are amber with "old → new" lines
("retries up to 2 times → 4 times"). Changes to the workflow as a whole (context, error
workflow, version) are listed in a box of their own. Both formats draw this one model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ..nodes import FINAL, StateNode, Transition
from ..render import graphviz, labels
from ..render.mermaid import mermaid_source
from ..render.model import RETRY, Arrow, Box, Diagram, _raw, build_diagram
from .changes import ADDED, CHANGED, REMOVED, STATE, TARGET, Change, MachineDiff, state_path
from .changes import RETRY as RETRY_CHANGE

__all__ = ["diff_diagram", "diff_dot", "diff_mermaid", "diff_png", "diff_svg"]

_NOTE_KEY = "workflow_changes"


def diff_dot(diff: MachineDiff) -> str:
    """The DOT text of the marked diagram."""
    return graphviz.dot_source(diff_diagram(diff))


def diff_mermaid(diff: MachineDiff) -> str:
    """The Mermaid text of the marked diagram (arrows' marks are words: Mermaid cannot colour
    one arrow)."""
    return mermaid_source(diff_diagram(diff))


def diff_svg(diff: MachineDiff) -> str:
    """The SVG of the marked diagram; raises GraphvizNotFound without ``dot``."""
    return graphviz.svg(diff_dot(diff))


def diff_png(diff: MachineDiff) -> bytes:
    """The PNG of the marked diagram; raises GraphvizNotFound without ``dot``."""
    return graphviz.png(diff_dot(diff))


def diff_diagram(diff: MachineDiff) -> Diagram:
    """The new machine's diagram with every change of ``diff`` marked."""
    return _Marking(diff).diagram()


class _Marking:
    def __init__(self, diff: MachineDiff) -> None:
        self.diff = diff
        self.base = build_diagram(diff.new)
        self.old_arrows = build_diagram(diff.old).arrows
        self.new_by_path = {state_path(n): n for n in diff.new.definition.nodes}
        self.boxes: dict[StateNode, Box] = dict(self.base.boxes)
        self.arrows = list(self.base.arrows)
        self.extra: dict[StateNode, list[StateNode]] = {}
        self.ghosts: dict[str, StateNode] = {}  # removed old path -> its box's node

    def diagram(self) -> Diagram:
        changes = self.diff.changes
        for change in changes:
            if change.kind == STATE and change.mark == REMOVED:
                assert change.old_node is not None
                self._ghost(change.old_node)
        for change in changes:
            self._place(change)
        self._mark_arrows_of_added_states()
        workflow = [c.text for c in changes if not c.where]
        if workflow:
            note = StateNode(_NOTE_KEY, "::workflow changes", (_NOTE_KEY,), self.base.root, "")
            self.boxes[note] = Box(
                note,
                "The whole workflow",
                None,
                (),
                (),
                failed=False,
                run_fails=False,
                active=False,
                region=False,
                mark=CHANGED,
                changes=tuple(workflow),
            )
            self.extra.setdefault(self.base.root, []).insert(0, note)
        title = f"{self.base.title}: what changed"
        return dataclasses.replace(
            self.base,
            title=title,
            boxes=self.boxes,
            arrows=tuple(self.arrows),
            extra={k: tuple(v) for k, v in self.extra.items()},
        )

    # -- boxes -------------------------------------------------------------------------------

    def _ghost(self, old: StateNode) -> None:
        """A removed state drawn back in, inside the nearest state the new machine still has
        (a removed state's removed children are part of its box)."""
        if any(state_path(a) in self.ghosts for a in old.ancestors):
            return
        parent = self._surviving(old.parent)
        ghost = StateNode(old.key, f"removed::{old.id}", old.path, parent, "")
        ghost.type = FINAL if old.type == FINAL else "atomic"
        inside = sum(1 for n in self.diff.old.definition.nodes if n.is_descendant_of(old))
        details = (f"with {inside} steps inside",) if inside else ()
        moved = self.diff.migrated_to.get(state_path(old))
        note = (f"its runs move to {moved} (migration)",) if moved else ()
        self.boxes[ghost] = Box(
            ghost,
            labels.state_title(old),
            labels.state_description(old),
            details,
            (),
            failed=False,
            run_fails=False,
            active=False,
            region=False,
            mark=REMOVED,
            changes=note,
        )
        self.extra.setdefault(parent, []).append(ghost)
        self.ghosts[state_path(old)] = ghost

    def _surviving(self, old: StateNode | None) -> StateNode:
        while old is not None and old.parent is not None:
            found = self.diff.matched.get(state_path(old))
            if found is not None:
                return self.new_by_path[found]
            old = old.parent
        return self.base.root

    def _node_for_old(self, old: StateNode) -> StateNode:
        """Where an old state is drawn: its new counterpart, else its removed box."""
        found = self.diff.matched.get(state_path(old))
        if found is not None:
            return self.new_by_path[found]
        for candidate in (old, *old.ancestors):
            ghost = self.ghosts.get(state_path(candidate))
            if ghost is not None:
                return ghost
        return self.base.root

    def _mark_box(self, node: StateNode, mark: str, line: str | None) -> None:
        box = self.boxes[node]
        if box.mark in (ADDED, REMOVED):
            return  # a new or removed state says it all
        lines = box.changes + ((line,) if line else ())
        self.boxes[node] = dataclasses.replace(
            box, mark=mark if box.mark is None else CHANGED, changes=lines
        )

    # -- arrows ------------------------------------------------------------------------------

    def _place(self, change: Change) -> None:
        if not change.where:
            return
        if change.kind == STATE:
            if change.mark == ADDED and change.new_node is not None:
                box = self.boxes[change.new_node]
                self.boxes[change.new_node] = dataclasses.replace(box, mark=ADDED)
            return
        if change.on_transition:
            self._place_on_arrow(change)
            return
        assert change.new_node is not None
        if change.kind == RETRY_CHANGE and self._retry_loop(change):
            self._mark_box(change.new_node, CHANGED, None)
            return
        self._mark_box(change.new_node, CHANGED, change.text)

    def _retry_loop(self, change: Change) -> bool:
        """Put a retry change on the state's retry loop, if it has one."""
        node = change.new_node
        attempting = node.initial if node is not None and node.retry is not None else None
        for index, arrow in enumerate(self.arrows):
            if arrow.kind == RETRY and arrow.source is attempting:
                self.arrows[index] = _marked(arrow, change.mark, change.text)
                return True
        return False

    def _place_on_arrow(self, change: Change) -> None:
        if change.mark == REMOVED and change.old_transition is not None:
            self._removed_arrow(change.old_transition, change.text)
            return
        transition = change.new_transition
        assert transition is not None
        if change.kind == TARGET and change.old_transition is not None:
            self._removed_arrow(change.old_transition, change.text)  # where it used to go
        line = None if change.mark == ADDED else change.drawn
        found = False
        for index, arrow in enumerate(self.arrows):
            if _draws(arrow, transition):
                self.arrows[index] = _marked(arrow, change.mark, line)
                found = True
        if not found and change.new_node is not None:  # stays in its state: listed in the box
            self._mark_box(change.new_node, CHANGED, change.text)

    def _removed_arrow(self, old: Transition, text: str) -> None:
        source = self._node_for_old(old.source)
        drawn = [a for a in self.old_arrows if _draws(a, old)]
        for arrow in drawn:
            target = self._node_for_old(arrow.target)
            self.arrows.append(
                Arrow(source, target, arrow.lines, arrow.kind, arrow.raw, REMOVED, ())
            )
        if not drawn:
            self._mark_box(source, CHANGED, text)

    def _mark_arrows_of_added_states(self) -> None:
        added = {n for n, b in self.boxes.items() if b.mark == ADDED}
        for index, arrow in enumerate(self.arrows):
            if arrow.mark is None and (arrow.source in added or arrow.target in added):
                self.arrows[index] = dataclasses.replace(arrow, mark=ADDED)


def _draws(arrow: Arrow, transition: Transition) -> bool:
    """True when ``arrow`` is (part of) the drawing of ``transition``."""
    return (
        arrow.source is transition.source
        and arrow.target in transition.targets
        and arrow.raw == _raw(transition)
    )


def _marked(arrow: Arrow, mark: str, line: str | None) -> Arrow:
    if arrow.mark in (ADDED, REMOVED):
        return arrow
    lines = arrow.changes + ((line,) if line else ())
    return dataclasses.replace(arrow, mark=mark if arrow.mark is None else CHANGED, changes=lines)


def marked_counts(diagram: Diagram) -> Mapping[str, int]:
    """How many boxes and arrows carry each mark (for tests and summaries)."""
    found = {ADDED: 0, REMOVED: 0, CHANGED: 0}
    for mark in (*(b.mark for b in diagram.boxes.values()), *(a.mark for a in diagram.arrows)):
        if mark is not None:
            found[mark] += 1
    return found
