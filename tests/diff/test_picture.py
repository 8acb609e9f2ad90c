"""The marked diagram: what a reviewer sees, in DOT (then SVG from the real ``dot``) and
Mermaid."""

from __future__ import annotations

import re

from statecharts.diff import diff_machines
from statecharts.diff.changes import MachineDiff
from statecharts.diff.picture import diff_diagram, diff_dot, diff_mermaid, diff_svg, marked_counts
from statecharts.render import to_dot
from statecharts.render.graphviz import MARK_COLOURS
from tests.diff.pairs import BASE, edited, machine, reviewed_change

GREEN, RED, AMBER = (MARK_COLOURS[m][0] for m in ("added", "removed", "changed"))


def reviewed() -> MachineDiff:
    return diff_machines(machine(BASE), machine(edited(reviewed_change)))


def dot_line(dot: str, needle: str) -> str:
    lines = [line for line in dot.splitlines() if needle in line]
    assert len(lines) == 1, (needle, lines)
    return lines[0]


def test_each_change_is_marked_where_it_happened() -> None:
    dot = diff_dot(reviewed())
    on_hold = dot_line(dot, '"order.on_hold" [shape')
    assert f'color="{GREEN}"' in on_hold
    labelling = dot_line(dot, '"removed::order.shipping.labelling" [shape')
    assert f'color="{RED}"' in labelling and "dashed" in labelling
    retry = dot_line(dot, '"order.charging.attempting" -> "order.charging.waiting_to_retry"')
    assert f'color="{AMBER}"' in retry and "style=dashed" in retry
    assert "retries up to 2 times → 4<BR/>times" in retry
    timer = dot_line(
        dot,
        '"order.waiting_for_payment" -> "order.cancelled" [label=<<TABLE '
        'BORDER="0" CELLPADDING="3" CELLSPACING="0"><TR><TD>after 15',
    )
    assert "after 5 minutes → after 15<BR/>minutes" in timer and f'color="{AMBER}"' in timer
    old_way = dot_line(dot, '"order.shipping.packing" -> "removed::order.shipping.labelling"')
    assert f'color="{RED}"' in old_way and "style=dashed" in old_way  # where it used to go
    new_way = dot_line(dot, '"order.shipping.packing" -> "order.shipping.done"')
    assert "goes to shipping.labelling →<BR/>shipping.done" in new_way
    workflow = dot_line(dot, '"::workflow changes" [')
    assert "error workflow none →<BR/>&quot;order_alerts&quot;" in workflow
    for words in ("added", "removed (dashed)", "changed: old → new"):
        assert f'<TD ALIGN="LEFT">{words}</TD>' in dot  # the key explains the marks


def test_the_one_key_lists_the_marks_next_to_the_chart_symbols() -> None:
    diagram = diff_diagram(reviewed())
    kinds = [kind for kind, _ in diagram.legend()]
    assert kinds[-3:] == ["added", "removed", "changed"]  # after issue 27's symbols
    assert "start" in kinds and "retry" in kinds
    assert diagram.error_workflow == "Order alerts"  # the new machine's facts stay drawn
    plain = [kind for kind, _ in diff_diagram(diff_machines(machine(BASE), machine(BASE))).legend()]
    assert not {"added", "removed", "changed"} & set(plain)
    key = [line for line in diff_mermaid(reviewed()).splitlines() if "s_key :" in line]
    assert any("green" in line and "added" in line for line in key)
    assert any("old → new" in line for line in key)


def test_the_removed_state_is_drawn_inside_the_state_that_held_it() -> None:
    diagram = diff_diagram(reviewed())
    [(parent, extra)] = [(p, e) for p, e in diagram.extra.items() if p.parent is not None]
    assert parent.id == "order.shipping" and [n.key for n in extra] == ["labelling"]
    # added: On hold and its two arrows; removed: Labelling and the arrow to it; changed:
    # the workflow note, Charging, its retry loop, the timer and the retargeted arrow.
    assert marked_counts(diagram) == {"added": 3, "removed": 2, "changed": 5}


def test_mermaid_says_the_same_with_classes_and_words() -> None:
    text = diff_mermaid(reviewed())
    assert "classDef added" in text and "classDef removed" in text
    assert re.search(r"class s_on_hold added", text)
    assert "s_shipping__packing --> s_shipping__labelling : (removed)<br/>packed" in text
    assert "(changed)<br/>retries up to 4 times," in text
    assert "retries up to 2 times → 4 times" in text


def test_an_unchanged_machine_draws_as_its_own_diagram_plus_the_title() -> None:
    same = diff_machines(machine(BASE), machine(BASE))
    plain = to_dot(machine(BASE))
    marked = diff_dot(same)
    assert marked.replace(": what changed", "") == plain


def test_the_svg_is_drawn_by_graphviz(dot_installed: str) -> None:
    svg = diff_svg(reviewed())
    assert svg.startswith("<?xml") or "<svg" in svg
    assert GREEN in svg and RED in svg and AMBER in svg
    assert "stroke-dasharray" in svg  # the removed state and arrow are dashed
    assert "Labelling" in svg and "retries up to 2 times → 4" in svg
