"""What a reviewer checks on a diagram is on it: every state under its own name (the
description below it), how each call is protected (errors never retried, the circuit breaker,
the idempotency key), the error workflow, regions in definition order, a deep chart wrapped
into columns, and a key listing only the symbols used."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from statecharts.render import to_dot, to_mermaid, to_svg
from statecharts.render.diagrams import discover
from statecharts.render.labels import humanize, sentence
from statecharts.render.model import build_diagram

from .examples import constructs, invoice, parallel_root

ROOT = Path(__file__).resolve().parents[2]
SVG = "{http://www.w3.org/2000/svg}"
ENTRIES = discover(ROOT / "machines")


def _svg_texts(svg: str) -> dict[str, str]:
    """Each drawn state's visible text (its lines joined by spaces), by state id."""
    found = {}
    for group in ET.fromstring(svg.encode()).iter(f"{SVG}g"):
        title = group.find(f"{SVG}title")
        if group.get("class") in ("node", "cluster") and title is not None and title.text:
            lines = [t.text or "" for t in group.iter(f"{SVG}text")]
            state = group.get("id", "")
            tooltip = next(
                (a.get("{http://www.w3.org/1999/xlink}title") for a in group.iter(f"{SVG}a")), None
            )
            found[tooltip or title.text or state] = " ".join(lines).replace("\u00a0", " ")
    return found


def test_the_nine_machines_are_the_committed_ones() -> None:
    assert len(ENTRIES) == 9, [e.stem for e in ENTRIES]


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.stem for e in ENTRIES])
def test_every_state_of_the_committed_diagrams_is_there_by_name(entry: object) -> None:
    machine = entry.machine  # type: ignore[attr-defined]
    stem = entry.stem  # type: ignore[attr-defined]
    svg = (ROOT / "diagrams" / f"{stem}.svg").read_text(encoding="utf-8")
    mermaid = (ROOT / "diagrams" / f"{stem}.mmd").read_text(encoding="utf-8")
    drawn = _svg_texts(svg)
    states = [n for n in machine.definition.nodes if n.parent is not None]
    assert states
    for node in states:
        name = (
            "H*"
            if node.history == "deep"
            else "H"
            if node.type == "history"
            else sentence(humanize(node.key))
        )
        assert node.id in drawn, f"{stem}: no box for {node.id}"
        assert drawn[node.id].lower().startswith(name.lower()), (
            f"{stem}: {node.id} is titled {drawn[node.id]!r}"
        )
        assert re.search(rf'state "{re.escape(name)}(<br/>[^"]*)?" as ', mermaid, re.I), (
            f"{stem}.mmd: no state titled {name!r}"
        )
        if node.description:  # below the name, in the box
            first_words = node.description.split()[0]
            assert first_words in drawn[node.id][len(name) :], (stem, node.id)


def test_invoice_shows_how_each_call_is_protected() -> None:
    entry = next(e for e in ENTRIES if e.stem == "invoice")
    box = build_diagram(entry.machine).boxes
    by_key = {node.key: b for node, b in box.items()}
    creating = by_key["creating_invoice"].details
    assert "never retried: InvoiceRejected" in creating  # a rejection is not tried 5 times
    assert "idempotency key: the same on every try" in creating  # charged at most once
    sending = by_key["sending_email"].details
    assert "circuit breaker “smtp”: fails fast while open" in sending
    assert not any("idempotency" in line for line in sending)  # its function takes no key
    assert by_key["fetching_customer"].details == (  # its database step is transient
        "doing: fetch customer",
        "on LedgerError: rolled back, tried again later",
    )
    for text in (to_dot(entry.machine), to_mermaid(entry.machine)):
        assert "never retried: InvoiceRejected" in text and "circuit breaker" in text


def test_a_description_that_only_spells_the_name_is_the_title_not_a_second_line() -> None:
    from statecharts import create_machine

    machine = create_machine(
        {
            "id": "m",
            "initial": "fetch_api_records",
            "states": {
                "fetch_api_records": {"description": "Fetch API Records", "on": {"GO": "done"}},
                "done": {"type": "final", "description": "the run is done"},
            },
        }
    )
    boxes = {node.key: box for node, box in build_diagram(machine).boxes.items()}
    assert (boxes["fetch_api_records"].title, boxes["fetch_api_records"].description) == (
        "Fetch API Records",
        None,
    )
    assert (boxes["done"].title, boxes["done"].description) == ("Done", "the run is done")


def test_the_error_workflow_a_failure_starts_is_named() -> None:
    evaluate = next(e for e in ENTRIES if e.machine.id == "followup_evaluate").machine
    assert build_diagram(evaluate).error_workflow == "Followup alerts"
    assert "the error workflow “Followup alerts”" in to_dot(evaluate)
    assert "it starts the error workflow “Followup alerts”" in to_mermaid(evaluate)
    alerts = next(e for e in ENTRIES if e.machine.id == "followup_alerts").machine
    assert build_diagram(alerts).error_workflow is None  # it is the error workflow
    assert "error workflow" not in to_mermaid(alerts)


def _x_of(svg: str, label: str) -> float:
    match = re.search(rf'<text[^>]*x="([-\d.]+)"[^>]*>{label}</text>', svg)
    assert match, label
    return float(match.group(1))


def test_parallel_regions_are_drawn_in_definition_order(dot_installed: str) -> None:
    svg = to_svg(constructs())  # "packing" is defined before "billing"
    assert _x_of(svg, "Packing") < _x_of(svg, "Billing")
    svg = to_svg(parallel_root())  # "light" before "fan"
    assert _x_of(svg, "Light") < _x_of(svg, "Fan")
    mermaid = to_mermaid(constructs())
    assert mermaid.index('"Packing" as') < mermaid.index('"Billing" as')


def _size(svg: str) -> tuple[float, float]:
    match = re.search(r'<svg width="([\d.]+)pt" height="([\d.]+)pt"', svg)
    assert match
    return float(match.group(1)), float(match.group(2))


def test_a_deep_chart_wraps_into_columns_and_uses_the_width(dot_installed: str) -> None:
    evaluate = next(e for e in ENTRIES if e.machine.id == "followup_evaluate").machine
    columns = build_diagram(evaluate).columns
    assert sorted(set(columns.values())) == [0, 1]
    by_key = {node.key: column for node, column in columns.items()}
    assert by_key["claiming"] == 0 and by_key["completed"] == 1
    width, height = _size(to_svg(evaluate))
    assert height < 1.6 * width, (width, height)  # one strip was 875 x 2865 pt
    assert build_diagram(invoice()).columns == {}  # a short chart stays one column
    # the simpler layout, tried when Graphviz cannot lay the columns out: one strip
    strip = to_dot(evaluate, columns=False)
    assert "cluster_column" in to_dot(evaluate) and "cluster_column" not in strip
    assert "constraint=false" not in strip
    assert to_dot(invoice(), columns=False) == to_dot(invoice())


def test_the_key_lists_only_what_the_chart_uses() -> None:
    small = build_diagram(invoice())
    kinds = [kind for kind, _ in small.legend()]
    assert "history" not in kinds and "parallel" not in kinds and "active" not in kinds
    assert {"start", "final", "error", "retry"} <= set(kinds)
    assert {kind for kind, _ in build_diagram(constructs()).legend()} >= {"history", "parallel"}
    light = [kind for kind, _ in build_diagram(parallel_root()).legend()]
    assert "retry" not in light and "final" not in light
    mermaid = to_mermaid(parallel_root())
    assert "s_key : -- separates parts that run at the same time" in mermaid
    assert "automatic retry" not in mermaid


def test_a_call_timeout_and_heartbeat_are_drawn_on_its_state() -> None:
    from statecharts import create_machine

    machine = create_machine(
        {
            "id": "m",
            "initial": "charging",
            "states": {
                "charging": {
                    "invoke": {
                        "src": "charge",
                        "timeout": 30_000,
                        "heartbeatTimeout": 5_000,
                        "onDone": "done",
                    }
                },
                "done": {"type": "final"},
            },
        },
        actors={"charge": lambda _input: "ok"},
    )
    boxes = {node.key: box for node, box in build_diagram(machine).boxes.items()}
    details = boxes["charging"].details
    assert "each try times out after 30 seconds" in details
    assert "fails if silent for 5 seconds (heartbeat)" in details
    for text in (to_dot(machine).replace("<BR/>", " "), to_mermaid(machine)):  # (wrapped)
        assert "times out after 30 seconds" in text
