"""Mermaid ``stateDiagram-v2`` output, so diagrams render inside GitHub and GitLab Markdown.

Same titles and labels as the Graphviz output (both come from ``model.py``). Mermaid cannot draw
an arrow between states inside two different composite states, so such an arrow is drawn
between the outermost states that differ, and its label names the real ends ("into: ...",
"from: ..."). Active states are marked with the ``active`` class, failure outcomes with
``failed``. The error workflow and the key are boxes of their own, as Mermaid has no legend;
Mermaid lays a deep chart out by itself (it cannot be told to wrap into columns).
"""

from __future__ import annotations

import re

from ..nodes import COMPOUND, FINAL, HISTORY, PARALLEL, StateNode
from .model import ADDED, CHANGED, REMOVED, Arrow, Box, Diagram

_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
# Mermaid syntax characters in labels, written as Mermaid's entity codes ("#35;" is "#"):
# Mermaid turns each back into its character when it draws, so a label shows the text as
# written (an n8n expression "{{ $json.a < 2 }}" stays that) and never breaks the syntax.
# One pass (``str.translate``): the codes' own "#" and ";" stay as they are.
_ENTITIES = str.maketrans(
    {"#": "#35;", '"': "#quot;", ";": "#59;", "{": "#123;", "}": "#125;", "<": "#60;", ">": "#62;"}
)
_CLASSES = (
    "    classDef active fill:#ffe08a,stroke:#b8860b,stroke-width:3px,font-weight:bold",
    "    classDef failed fill:#fdecea,stroke:#c0392b,color:#c0392b",
    "    classDef anywhere fill:#ffffff,stroke:#999999,stroke-dasharray:4 3,color:#555555",
    "    classDef note fill:#ffffff,stroke:#bbbbbb,color:#333333,font-size:12px",
)
# A diff's change marks: box styles, and the word that opens a marked arrow's label (Mermaid
# cannot colour one arrow of a state diagram).
_MARK_CLASSES = {
    ADDED: "    classDef added fill:#e9f7ef,stroke:#1e8449,stroke-width:3px",
    REMOVED: "    classDef removed fill:#ffffff,stroke:#c0392b,stroke-dasharray:5 4,color:#c0392b",
    CHANGED: "    classDef changed fill:#fdf2e0,stroke:#b9770e,stroke-width:3px",
}
_MARK_WORDS = {ADDED: "(new)", REMOVED: "(removed)", CHANGED: "(changed)"}
_LEGEND = {
    "start": "● where it starts",
    "final": "◉ finished",
    "history": "H: resumes where it left off (H*: nested too)",
    "parallel": "-- separates parts that run at the same time",
    "error": "red: error path",
    "run_fails": "red end: the run fails",
    "retry": "attempting ⇄ waiting to retry: automatic retry",
    "active": "gold: where the run is now",
    ADDED: "green, (new): added",
    REMOVED: "red dashed, (removed): removed",
    CHANGED: "amber, (changed): old → new",
}


def mermaid_source(diagram: Diagram) -> str:
    """The Mermaid text of ``diagram``: the same diagram always gives the same text."""
    ids = _ids(diagram)
    placed = _place_arrows(diagram)
    out = ["---", f"title: {_text(diagram.title)}", "---", "stateDiagram-v2"]
    if diagram.highlighted:
        out.append("    %% highlighted: where this run is now")
    if any(a.source is diagram.root for a in diagram.arrows):
        out.append(f'    state "from any state" as {ids[diagram.root]}')
    if diagram.root.type == PARALLEL:
        # Mermaid allows "--" region separators only inside a composite state.
        out.append(f'    state "{_text(diagram.title)}" as s_root {{')
        _block(diagram, diagram.root, ids, placed, out, "        ")
        out.append("    }")
    else:
        _block(diagram, diagram.root, ids, placed, out, "    ")
    _notes(diagram, out)
    out.extend(_CLASSES)
    marks = diagram.marks()
    out.extend(line for mark, line in _MARK_CLASSES.items() if mark in marks)
    for name, members in (
        (
            "active",
            [
                b.node
                for b in diagram.boxes.values()
                if b.active and b.node.type not in (COMPOUND, PARALLEL)
            ],
        ),
        ("failed", [b.node for b in diagram.boxes.values() if b.failed]),
        *(
            (
                mark,
                [
                    b.node
                    for b in diagram.boxes.values()
                    if b.mark == mark and b.node.type not in (COMPOUND, PARALLEL)
                ],
            )
            for mark in _MARK_CLASSES
        ),
    ):
        if members:
            out.append(f"    class {','.join(ids[n] for n in members)} {name}")
    if any(a.source is diagram.root for a in diagram.arrows):
        out.append(f"    class {ids[diagram.root]} anywhere")
    out.append(
        "    class s_key" + (",s_error_workflow" if diagram.error_workflow else "") + " note"
    )
    return "\n".join(out) + "\n"


def _notes(diagram: Diagram, out: list[str]) -> None:
    """The error workflow (if any) and the key, as free-standing boxes."""
    if diagram.error_workflow is not None:
        out.append('    state "If a run fails" as s_error_workflow')
        out.append(
            f"    s_error_workflow : it starts the error workflow “{_text(diagram.error_workflow)}”"
        )
    out.append('    state "Key" as s_key')
    out.extend(f"    s_key : {_text(_LEGEND[kind])}" for kind, _ in diagram.legend())


def _box_lines(box: Box) -> tuple[str, ...]:
    """The lines under a state's title: its description, details, a run's progress, and on a
    diff's diagram what changed."""
    return (
        *((box.description,) if box.description else ()),
        *box.details,
        *box.now,
        *_mark_lines(box),
    )


def _ids(diagram: Diagram) -> dict[StateNode, str]:
    """Mermaid ids: ``s_`` + the state's path, made unique."""
    ids: dict[StateNode, str] = {}
    used: set[str] = set()
    for node in diagram.boxes:
        name = (
            "s_" + "__".join(_UNSAFE.sub("_", key) for key in node.path)
            if node.path
            else "s_any_state"
        )
        if name in used:
            name = f"{name}_{node.order}"
        used.add(name)
        ids[node] = name
    return ids


def _block(
    diagram: Diagram,
    parent: StateNode,
    ids: dict[StateNode, str],
    placed: dict[StateNode, list[tuple[StateNode, StateNode, Arrow]]],
    out: list[str],
    indent: str,
) -> None:
    if parent.type == COMPOUND and parent.initial is not None:
        out.append(f"{indent}[*] --> {ids[parent.initial]}")
    # History circles first: in a parallel block, "--" separates regions and they are none.
    children = (*parent.history_children, *parent.regions)
    for i, child in enumerate(children):
        if parent.type == PARALLEL and i > len(parent.history_children):
            out.append(f"{indent}--")
        box = diagram.box(child)
        if child.type in (COMPOUND, PARALLEL):
            # A composite state takes no description lines: they join its title.
            title = "<br/>".join(_text(line) for line in (box.title, *_box_lines(box)))
            out.append(f'{indent}state "{title}" as {ids[child]} {{')
            _block(diagram, child, ids, placed, out, indent + "    ")
            out.append(f"{indent}}}")
        else:
            _simple_state(box, ids[child], out, indent)
        if child.type == FINAL:
            out.append(f"{indent}{ids[child]} --> [*]")
    for extra in diagram.extra.get(parent, ()):  # a diff's removed states
        _simple_state(diagram.box(extra), ids[extra], out, indent)
    for source, target, arrow in placed.get(parent, []):
        label = "<br/>".join(_text(line) for line in _lines(diagram, source, target, arrow))
        out.append(f"{indent}{ids[source]} --> {ids[target]} : {label}")


def _simple_state(box: Box, name: str, out: list[str], indent: str) -> None:
    out.append(f'{indent}state "{_text(box.title)}" as {name}')
    out.extend(f"{indent}{name} : {_text(detail)}" for detail in _box_lines(box))


def _mark_lines(box: Box) -> tuple[str, ...]:
    """A marked box's change lines, opened by its mark word ("(changed)")."""
    if box.mark is None:
        return ()
    return (_MARK_WORDS[box.mark], *box.changes)


def _place_arrows(diagram: Diagram) -> dict[StateNode, list[tuple[StateNode, StateNode, Arrow]]]:
    """Each arrow in the block of the deepest state holding both ends, with its ends moved up
    to that block's direct children."""
    placed: dict[StateNode, list[tuple[StateNode, StateNode, Arrow]]] = {}
    for arrow in diagram.arrows:
        if arrow.source.parent is None:
            target = _child_towards(diagram.root, arrow.target)
            placed.setdefault(diagram.root, []).append((diagram.root, target, arrow))
            continue
        holder = _common_parent(arrow.source, arrow.target)
        placed.setdefault(holder, []).append(
            (_child_towards(holder, arrow.source), _child_towards(holder, arrow.target), arrow)
        )
    return placed


def _common_parent(a: StateNode, b: StateNode) -> StateNode:
    """The deepest proper ancestor of ``a`` that is an ancestor-or-self of ``b``'s parent."""
    b_line = {b, *b.ancestors}
    for ancestor in a.ancestors:
        if ancestor in b_line and ancestor is not b:
            return ancestor
    return a.ancestors[-1]


def _child_towards(holder: StateNode, node: StateNode) -> StateNode:
    """The child of ``holder`` that is ``node`` or contains it (``holder`` for the root)."""
    if node is holder:
        return holder
    for candidate in (node, *node.ancestors):
        if candidate.parent is holder:
            return candidate
    return node


def _lines(diagram: Diagram, source: StateNode, target: StateNode, arrow: Arrow) -> list[str]:
    lines = list(arrow.lines)
    if arrow.mark is not None:
        lines = [_MARK_WORDS[arrow.mark], *lines, *arrow.changes]
    if source is not arrow.source and arrow.source.parent is not None:
        lines.append(f"from: {diagram.box(arrow.source).title}")
    if target is not arrow.target and arrow.target.type == HISTORY:
        lines.append("back to where it left off")
    elif target is not arrow.target:
        lines.append(f"into: {diagram.box(arrow.target).title}")
    return lines


def _text(text: str) -> str:
    """Text Mermaid shows as written: its syntax characters as entity codes, lines joined."""
    return text.replace("\n", " ").translate(_ENTITIES)
