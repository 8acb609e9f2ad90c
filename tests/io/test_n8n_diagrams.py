"""The diagram of an imported workflow says what a reviewer needs: what each Wait waits for,
a loop's batch size, that a Merge waits for its inputs, what Stop and Error says, and the
node names as n8n wrote them, without the "no items go on" arrow out of every node."""

from __future__ import annotations

import importlib.util

import pytest

from statecharts.io.n8n import from_n8n
from statecharts.io.n8n.validation import build_machines
from tests.io.n8n_corpus import connections

pytestmark = pytest.mark.skipif(importlib.util.find_spec("statecharts.render") is None,
                                reason="statecharts.render (the diagram renderer) is not here")


def _workflow() -> dict[str, object]:
    def node(name: str, kind: str, x: int, y: int = 0, **extra: object) -> dict[str, object]:
        return {"name": name, "type": f"n8n-nodes-base.{kind}", "typeVersion": 1,
                "position": [x, y], "parameters": {}, **extra}

    return {
        "nodes": [
            node("Go", "manualTrigger", 0),
            node("Wait 5 min", "wait", 200, typeVersion=1.1,
                 parameters={"amount": 5, "unit": "minutes"}),
            node("Wait for approval", "wait", 200, 200, typeVersion=1.1,
                 parameters={"resume": "webhook"}),
            node("Loop Over Items", "splitInBatches", 400, typeVersion=3,
                 parameters={"batchSize": 3}),
            node("Call API", "httpRequest", 600, typeVersion=4.2),
            node("Merge", "merge", 800, typeVersion=3, parameters={"mode": "append"}),
            node("Fail (#1)", "stopAndError", 1000,
                 parameters={"errorMessage": "=Failed: {{ $json.error }}"}),
            node("Log", "set", 1000, 200), node("Notify", "set", 1000, 400),
            node("Archive", "set", 1000, 600),
        ],
        "connections": connections([
            ("Go", 0, "Wait 5 min", 0), ("Go", 0, "Wait for approval", 0),
            ("Wait 5 min", 0, "Loop Over Items", 0), ("Loop Over Items", 1, "Call API", 0),
            ("Call API", 0, "Loop Over Items", 0), ("Loop Over Items", 0, "Merge", 0),
            ("Wait for approval", 0, "Merge", 1), ("Merge", 0, "Fail (#1)", 0),
            ("Merge", 0, "Log", 0), ("Merge", 0, "Notify", 0), ("Merge", 0, "Archive", 0)]),
        "settings": {"executionOrder": "v1"}}


def test_the_diagram_says_what_each_node_waits_for_and_does() -> None:
    from statecharts.render import to_dot, to_mermaid

    machine, _ = build_machines(from_n8n(_workflow(), "review"))
    text = to_mermaid(machine)
    assert 's_wait_5_min : waits 5 minutes' in text
    assert "s_wait_for_approval : waits for WAIT_FOR_APPROVAL_WEBHOOK_CALLED" in text
    assert "s_loop_over_items : Loop Over Items: batches of 3" in text
    assert "s_merge : Merge: waits for its 2 inputs (append)" in text
    assert "s_call_api : doing: httpRequest v4.2" in text
    assert 'state "Fail (no. 1)" as s_fail_1' in text  # Mermaid's look-alike for '#'
    dot = to_dot(machine)
    # the expression as written (wrapped where the line is long)
    assert "fails the run: =Failed: {{<BR/>$json.error }}" in dot
    assert "Fail (#1)" in dot
    # one line in next_branch's box instead of an arrow out of each node
    assert "s_next_branch : from 9 states: no items go on: the next waiting branch" in text
    assert text.count("--> s_next_branch : no items go on") == 0
    assert "n 8 n" not in text and "n 8 n" not in dot
