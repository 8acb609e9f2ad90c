"""The diagram of an imported workflow says what a reviewer needs: what each Wait waits for
(in its box and on the arrows it drives), a loop's batch size, that a Merge waits for its
inputs, what Stop and Error says (an expression as written), and the node names as n8n wrote
them; its arrows read as n8n's wires ("true", "loop", "after 5 minutes"), without the
machine's bookkeeping ("if next node is ...") and without the "no items go on" arrow out of
every node."""

from __future__ import annotations

import importlib.util

import pytest

from statecharts.io.n8n import from_n8n
from statecharts.io.n8n.validation import build_machines
from tests.io.n8n_corpus import connections

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("statecharts.render") is None,
    reason="statecharts.render (the diagram renderer) is not here",
)


def _workflow() -> dict[str, object]:
    def node(name: str, kind: str, x: int, y: int = 0, **extra: object) -> dict[str, object]:
        return {
            "name": name,
            "type": f"n8n-nodes-base.{kind}",
            "typeVersion": 1,
            "position": [x, y],
            "parameters": {},
            **extra,
        }

    return {
        "nodes": [
            node("Go", "manualTrigger", 0),
            node(
                "Wait 5 min",
                "wait",
                200,
                typeVersion=1.1,
                parameters={"amount": 5, "unit": "minutes"},
            ),
            node(
                "Wait for approval",
                "wait",
                200,
                200,
                typeVersion=1.1,
                parameters={"resume": "webhook"},
            ),
            node(
                "Loop Over Items", "splitInBatches", 400, typeVersion=3, parameters={"batchSize": 3}
            ),
            node("Call API", "httpRequest", 600, typeVersion=4.2),
            node("Merge", "merge", 800, typeVersion=3, parameters={"mode": "append"}),
            node(
                "Fail (#1)",
                "stopAndError",
                1000,
                parameters={"errorMessage": "=Failed: {{ $json.error }}; code < 2"},
            ),
            node("Log", "set", 1000, 200),
            node("Notify", "set", 1000, 400),
            node("Archive", "set", 1000, 600),
            node("Valid?", "if", 1200, 200, typeVersion=2),
            node("SplitInBatches", "noOp", 1400, 200),
            node("Customer Messenger - Send message to client with the code", "set", 1400, 400),
            node(
                "Wait for the form",
                "wait",
                1600,
                200,
                typeVersion=1.1,
                parameters={
                    "resume": "form",
                    "limitWaitTime": True,
                    "resumeAmount": 2,
                    "resumeUnit": "hours",
                },
            ),
        ],
        "connections": connections(
            [
                ("Go", 0, "Wait 5 min", 0),
                ("Go", 0, "Wait for approval", 0),
                ("Wait 5 min", 0, "Loop Over Items", 0),
                ("Loop Over Items", 1, "Call API", 0),
                ("Call API", 0, "Loop Over Items", 0),
                ("Loop Over Items", 0, "Merge", 0),
                ("Wait for approval", 0, "Merge", 1),
                ("Merge", 0, "Fail (#1)", 0),
                ("Merge", 0, "Log", 0),
                ("Merge", 0, "Notify", 0),
                ("Merge", 0, "Archive", 0),
                ("Log", 0, "Valid?", 0),
                ("Valid?", 0, "SplitInBatches", 0),
                ("Valid?", 1, "Customer Messenger - Send message to client with the code", 0),
                ("SplitInBatches", 0, "Wait for the form", 0),
            ]
        ),
        "settings": {"executionOrder": "v1"},
    }


def test_the_diagram_says_what_each_node_waits_for_and_does() -> None:
    from statecharts.render import to_dot, to_mermaid

    machine, _ = build_machines(from_n8n(_workflow(), "review"))
    text = to_mermaid(machine)
    assert "s_wait_5_min : waits 5 minutes" in text
    assert "s_wait_for_approval : waits for WAIT_FOR_APPROVAL_WEBHOOK_CALLED" in text
    assert "s_loop_over_items : Loop Over Items: batches of 3" in text
    assert "s_merge : Merge: waits for its 2 inputs (append)" in text
    assert "s_call_api : doing: httpRequest v4.2" in text
    dot = to_dot(machine)
    # the expression as written (wrapped where the line is long), HTML-escaped in the DOT
    assert "fails the run: =Failed: {{<BR/>$json.error }}; code &lt; 2" in dot
    assert "Fail (#1)" in dot
    # one line in next_branch's box instead of an arrow out of each node
    assert "s_next_branch : from 12 states: no items go on: the next waiting branch" in text
    assert text.count("--> s_next_branch : no items go on") == 0
    assert "n 8 n" not in text and "n 8 n" not in dot


def test_mermaid_shows_raw_text_as_written_in_entity_codes() -> None:
    # before: '#' became "no. ", '{' '(', '<' a look-alike and ';' ',': the expression was altered
    from statecharts.render import to_mermaid

    text = to_mermaid(build_machines(from_n8n(_workflow(), "review"))[0])
    assert 'state "Fail (#35;1)" as s_fail_1' in text
    assert (
        "s_fail_1 : fails the run: =Failed: #123;#123; $json.error #125;#125;#59; "
        "code #60; 2" in text
    )
    assert "no. " not in text and "\u2039" not in text


def test_the_arrows_read_as_n8ns_wires_and_say_what_each_wait_waits_for() -> None:
    # before: every arrow had "if next node is (node X)" or "if current node is (node X)"
    # under its wire, and a Wait's arrow said "its items", its timer only inside its box
    from statecharts.render import to_dot, to_mermaid

    machine, _ = build_machines(from_n8n(_workflow(), "review"))
    text, dot = to_mermaid(machine), to_dot(machine)
    for line in (
        "s_waiting_for_trigger --> s_wait_5_min : on GO",
        "s_wait_5_min --> s_loop_over_items : after 5 minutes",
        "s_wait_for_approval --> s_merge : on WAIT_FOR_APPROVAL_WEBHOOK_CALLED: its "
        "items (input 2)",
        "s_loop_over_items --> s_call_api : loop",
        "s_loop_over_items --> s_merge : done (input 1)",
        "s_merge --> s_log : its items",
        "s_valid --> s_splitinbatches : true",
        "s_valid --> s_customer_messenger_send_message_to : false",
        # wired to nothing: the fallback arrow says what the Wait waited for
        "s_wait_for_the_form --> s_next_branch : on WAIT_FOR_THE_FORM_FORM_SUBMITTED: "
        "no items go on: the next waiting branch",
        "s_wait_for_the_form --> s_next_branch : after 2 hours without the form (time "
        "limit): no items go on: the next waiting branch",
        "s_next_branch --> s_loops_forever : the run goes round without end",
        "s_next_branch --> s_done : nothing left",
    ):
        assert line in text, line
    # the next waiting branch may resume any of 10 nodes: one line, not 10 arrows across
    assert "s_next_branch : then one of 10 (resume …): Wait 5 min, Wait for approval, " in text
    assert "s_next_branch --> s_merge" not in text
    for noise in (
        "next node is",
        "current node is",
        "otherwise",
        "loops forever<",
        "if loops forever",
        "then:",
    ):
        assert noise not in text and noise not in dot, noise


def test_node_names_are_titles_as_n8n_wrote_them() -> None:
    # before: "Splitinbatches" and "Customer messenger send message to", from the state keys
    from statecharts.render import to_mermaid

    text = to_mermaid(build_machines(from_n8n(_workflow(), "review"))[0])
    assert 'state "SplitInBatches" as s_splitinbatches' in text
    assert (
        'state "Customer Messenger - Send message to client with the code" as '
        "s_customer_messenger_send_message_to"
    ) in text
    assert 'state "Valid?" as s_valid' in text


def test_even_two_no_items_arrows_are_one_line_in_the_end_box() -> None:
    # before: a short workflow drew "no items go on: the run ends / otherwise" out of each node
    from statecharts.render import to_mermaid

    def node(name: str, kind: str, x: int) -> dict[str, object]:
        return {
            "name": name,
            "type": f"n8n-nodes-base.{kind}",
            "typeVersion": 1,
            "position": [x, 0],
            "parameters": {},
        }

    data = {
        "nodes": [
            node("Go", "manualTrigger", 0),
            node("Fetch", "httpRequest", 200),
            node("Save", "set", 400),
        ],
        "connections": connections([("Go", 0, "Fetch", 0), ("Fetch", 0, "Save", 0)]),
        "settings": {"executionOrder": "v1"},
    }
    text = to_mermaid(build_machines(from_n8n(data, "short"))[0])
    assert "s_done : from 3 states: no items go on: the run ends" in text
    assert "--> s_done :" not in text
    assert "s_fetch --> s_save : its items\n" in text
