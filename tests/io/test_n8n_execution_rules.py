"""n8n's execution rules, one small workflow each, with the calls and items n8n makes stated
from n8n's source (n8n-io/n8n), not from the importer's model: the imported machine must make
exactly those calls, in the v1 order and in the legacy order (``settings.executionOrder``
absent). Each test also runs the independent model in ``n8n_oracle`` on the same stubs.

Sources: packages/core/src/execution-engine/workflow-execute.ts (``processRunExecutionData``,
``addNodeToBeExecuted``, ``runNode``, ``prepareConnectionInputData``, ``handleExecuteOnce``,
``handleNodeExecutionError``, ``handleNodeErrorOutput``, ``ensureAlwaysOutputData``),
packages/workflow/src/common/get-connected-nodes.ts (``getConnectedNodes``), and
packages/nodes-base/nodes/SplitInBatches/v1..v3 (``execute``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from statecharts import SimulatedClock, create_actor
from statecharts.io.n8n import from_n8n
from tests.io.n8n_corpus import connections
from tests.io.n8n_oracle import StubFailure, Stubs, machine_run, n8n_run, stub_machine, widths_of

Items = list[dict[str, Any]]
ORDERS = ("v1", "legacy")


def export(
    nodes: list[tuple[str, str, tuple[float, float], dict[str, Any]]],
    wires: list[tuple[str, int, str, int]],
    order: str,
) -> dict[str, Any]:
    """An export: nodes as (name, type, position, extra node fields); wires as (from, output,
    to, input), written in this order."""
    built = []
    for name, kind, position, extra in nodes:
        node = {
            "name": name,
            "type": kind if "." in kind else f"n8n-nodes-base.{kind}",
            "typeVersion": 1,
            "position": list(position),
            "parameters": {},
        }
        node.update(extra)
        built.append(node)
    return {
        "nodes": built,
        "connections": connections(wires),
        "settings": {"executionOrder": "v1"} if order == "v1" else {},
    }


def item(**fields: Any) -> dict[str, Any]:
    return {"json": fields}


class Script(Stubs):
    """Stubs whose answers are written per node: ``answers[node](inputs, call)`` returns one
    item list per output (raises ``StubFailure`` to fail); unscripted nodes echo input 0."""

    def __init__(self, answers: dict[str, Callable[[list[Items], int], list[Items]]]) -> None:
        super().__init__(0)
        self.answers = answers

    def call(self, node: str, inputs: list[Items], outputs: int) -> list[Items]:
        n = self.counts.get(node, 0)
        self.counts[node] = n + 1
        self.calls.append((node, [list(i) for i in inputs]))
        answer = self.answers.get(node)
        result = answer(inputs, n) if answer else [list(inputs[0]) if inputs else []]
        return (result + [[] for _ in range(outputs)])[:outputs] if outputs else []


def run(
    data: dict[str, Any], answers: dict[str, Callable[[list[Items], int], list[Items]]]
) -> tuple[list[tuple[str, list[Items]]], str]:
    """The machine's calls and end, checked against the oracle's on the same answers."""
    result = from_n8n(data, "w")
    trace = machine_run(result, "GO", Script(answers), widths_of(data))
    oracle = n8n_run(data, "Go", Script(answers))
    assert (trace.calls, trace.status) == (oracle.calls, oracle.status)
    return trace.calls, trace.status


def names(calls: list[tuple[str, list[Items]]]) -> list[str]:
    return [name for name, _ in calls]


GO = ("Go", "manualTrigger", (0, 0), {})


# -- 1. a waiting Merge is skipped while one of its upstream nodes still waits -------------------


@pytest.mark.parametrize("order", ORDERS)
def test_a_merge_waits_while_a_merge_upstream_of_it_still_waits(order: str) -> None:
    """Go -> If; If true -> M1[0] and M2[1]; If false -> M1[1]; M1 -> M2[0]; M2 -> After.

    v1: after If both Merges wait (M2 added first: ``nodesToAdd.sort`` puts the lower M2
    first). The stack is empty, so ``processRunExecutionData`` looks at the waiting nodes in
    ``Object.keys`` order: M2 is skipped because ``workflow.getParentNodes('M2')`` holds the
    waiting M1 (``parentIsWaiting``); M1 runs with ``[items, []]``, its output completes M2's
    round, and M2 runs once with both inputs. Legacy: ``addNodeToBeExecuted`` also adds the
    empty false output to M1's input 1 (``connectionData.index > 0 &&
    isLegacyExecutionOrder``), which completes M1 at once; the calls are the same. Before,
    the machine released M2 first and M2 and After ran twice."""
    data = export(
        [
            GO,
            ("If", "if", (200, 0), {}),
            ("M1", "merge", (400, 0), {}),
            ("M2", "merge", (600, 100), {}),
            ("After", "set", (800, 100), {}),
        ],
        [
            ("Go", 0, "If", 0),
            ("If", 0, "M1", 0),
            ("If", 0, "M2", 1),
            ("If", 1, "M1", 1),
            ("M1", 0, "M2", 0),
            ("M2", 0, "After", 0),
        ],
        order,
    )
    x, m1 = item(x=1), item(by="M1")
    calls, status = run(
        data,
        {
            "If": lambda inputs, n: [[x], []],
            "M1": lambda inputs, n: [[m1]],
            "M2": lambda inputs, n: [inputs[0] + inputs[1]],
        },
    )
    assert calls == [
        ("If", [[item()]]),
        ("M1", [[x], []]),
        ("M2", [[m1], [x]]),
        ("After", [[m1, x]]),
    ]
    assert status == "done"


# -- 2. Loop Over Items never restarts once done (n8n issue #23670) ------------------------------


@pytest.mark.parametrize("order", ORDERS)
def test_an_inner_loop_once_done_skips_every_later_round_of_the_outer_loop(order: str) -> None:
    """Go -> Items -> Outer (v3, batch 1) -loop-> Inner (v3, batch 1) -loop-> Body -> Inner;
    Inner -done-> Outer; Outer -done-> End.

    SplitInBatchesV3.execute starts afresh only when ``nodeContext.items === undefined`` (or
    ``options.reset``). Outer's first round: Inner stores ``[a]``, hands out ``[a]``, Body
    returns ``[a']``, Inner has no batch left and sends its processed ``[a']`` on done. Outer's
    second round brings ``[b]``: Inner's context still holds its (empty) items, so it hands
    out nothing, adds ``[b]`` to the processed items and sends ``[a', b]`` on done at once:
    Body never sees ``b`` (n8n issue #23670). Outer then sends ``[a', a', b]`` to End. The
    import follows production and says so. Before, the inner loop restarted and Body ran
    twice."""
    loop = {"typeVersion": 3, "parameters": {"batchSize": 1}}
    data = export(
        [
            GO,
            ("Items", "set", (200, 0), {}),
            ("Outer", "splitInBatches", (400, 0), loop),
            ("Inner", "splitInBatches", (600, 0), loop),
            ("Body", "set", (800, 0), {}),
            ("End", "set", (600, -200), {}),
        ],
        [
            ("Go", 0, "Items", 0),
            ("Items", 0, "Outer", 0),
            ("Outer", 1, "Inner", 0),
            ("Outer", 0, "End", 0),
            ("Inner", 1, "Body", 0),
            ("Inner", 0, "Outer", 0),
            ("Body", 0, "Inner", 0),
        ],
        order,
    )
    a, b, a2 = item(id="a"), item(id="b"), item(id="a'")
    calls, status = run(
        data, {"Items": lambda inputs, n: [[a, b]], "Body": lambda inputs, n: [[a2]]}
    )
    assert calls == [("Items", [[item()]]), ("Body", [[a]]), ("End", [[a2, a2, b]])]
    assert status == "done"
    decisions = " ".join(from_n8n(data, "w").decisions)
    assert "'Inner' runs inside another loop" in decisions and "#23670" in decisions
    assert "'Outer' runs inside another loop" not in decisions


# -- 3. the option reset re-initialises the loop on every visit ---------------------------------


@pytest.mark.parametrize("order", ORDERS)
def test_a_loop_with_reset_starts_again_from_the_items_of_every_visit(order: str) -> None:
    """Go -> Start -> Poll loop (v3, batch 1, options.reset true) -loop-> Poll -> Poll loop.

    ``if (nodeContext.items === undefined || options.reset === true)``: every visit stores
    the incoming items afresh and hands out their first batch, so the loop goes on while
    Poll returns items and ends when it returns none (an output with no items adds no node).
    Before, the option was ignored: the second visit found no batch left, sent the one item
    on done and the workflow polled once."""
    data = export(
        [
            GO,
            ("Start", "set", (200, 0), {}),
            (
                "Poll loop",
                "splitInBatches",
                (400, 0),
                {"typeVersion": 3, "parameters": {"batchSize": 1, "options": {"reset": True}}},
            ),
            ("Poll", "httpRequest", (600, 0), {}),
        ],
        [
            ("Go", 0, "Start", 0),
            ("Start", 0, "Poll loop", 0),
            ("Poll loop", 1, "Poll", 0),
            ("Poll", 0, "Poll loop", 0),
        ],
        order,
    )
    s = item(page=0)
    pages = [[item(page=1)], [item(page=2)], []]
    calls, status = run(
        data, {"Start": lambda inputs, n: [[s]], "Poll": lambda inputs, n: [pages[n]]}
    )
    assert calls == [
        ("Start", [[item()]]),
        ("Poll", [[s]]),
        ("Poll", [pages[0]]),
        ("Poll", [pages[1]]),
    ]
    assert status == "done"


def test_a_reset_written_as_an_expression_is_left_to_the_user_by_name() -> None:
    data = export(
        [
            GO,
            (
                "Poll loop",
                "splitInBatches",
                (400, 0),
                {"typeVersion": 3, "parameters": {"options": {"reset": "={{ $json.again }}"}}},
            ),
            ("Poll", "httpRequest", (600, 0), {}),
        ],
        [("Go", 0, "Poll loop", 0), ("Poll loop", 1, "Poll", 0), ("Poll", 0, "Poll loop", 0)],
        "v1",
    )
    [decision] = [d for d in from_n8n(data, "w").decisions if "reset" in d]
    assert decision.startswith("'Poll loop': its option reset is an n8n expression")


# -- 4. executeOnce hands the node only the first item ------------------------------------------


@pytest.mark.parametrize("order", ORDERS)
def test_execute_once_hands_the_node_only_the_first_item(order: str) -> None:
    """Go -> Items -> Once (executeOnce) -> After. ``runNode`` calls ``handleExecuteOnce``,
    which keeps ``input.slice(0, 1)`` of every input. Before, Once got all three items."""
    data = export(
        [
            GO,
            ("Items", "set", (200, 0), {}),
            ("Once", "httpRequest", (400, 0), {"executeOnce": True}),
            ("After", "set", (600, 0), {}),
        ],
        [("Go", 0, "Items", 0), ("Items", 0, "Once", 0), ("Once", 0, "After", 0)],
        order,
    )
    three = [item(i=0), item(i=1), item(i=2)]
    calls, status = run(data, {"Items": lambda inputs, n: [three]})
    assert calls == [("Items", [[item()]]), ("Once", [three[:1]]), ("After", [three[:1]])]
    assert status == "done"
    once = from_n8n(data, "w").primary.config["states"]["once"]
    assert once["invoke"]["input"] == {"$n8n": "items_once"}


# -- 5. a failure continuing on the error output keeps the input item's fields -------------------


def _fails(inputs: list[Items], n: int) -> list[Items]:
    raise StubFailure("quota exceeded")


@pytest.mark.parametrize("order", ORDERS)
def test_an_error_output_item_keeps_the_input_items_fields_beside_the_error(order: str) -> None:
    """Go -> Items -> Call (onError continueErrorOutput) -success-> Ok, -error-> Handle.

    A node under ``continueOnFail()`` catches each item's failure and returns
    ``{json: {error}}`` paired with that item; ``handleNodeErrorOutput`` moves it to the error
    output as ``{...pairedItem.json, ...item.json}``: the input's fields with ``error``
    beside them, one per input item. Before, Handle got one item holding only the error."""
    data = export(
        [
            GO,
            ("Items", "set", (200, 0), {}),
            ("Call", "httpRequest", (400, 0), {"onError": "continueErrorOutput"}),
            ("Ok", "set", (600, 0), {}),
            ("Handle", "set", (600, 200), {}),
        ],
        [
            ("Go", 0, "Items", 0),
            ("Items", 0, "Call", 0),
            ("Call", 0, "Ok", 0),
            ("Call", 1, "Handle", 0),
        ],
        order,
    )
    two = [item(id=1), item(id=2)]
    calls, status = run(data, {"Items": lambda inputs, n: [two], "Call": _fails})
    assert calls == [
        ("Items", [[item()]]),
        ("Call", [two]),
        ("Handle", [[item(id=1, error="quota exceeded"), item(id=2, error="quota exceeded")]]),
    ]
    assert status == "done"


@pytest.mark.parametrize("order", ORDERS)
def test_a_failure_continuing_on_the_regular_output_sends_one_error_item_per_item(
    order: str,
) -> None:
    """The same with ``continueRegularOutput``: the node's own ``{json: {error}}`` items go
    down output 0 unchanged (``handleNodeErrorOutput`` only runs for the error output); with
    ``executeOnce`` the node saw, and failed, one item."""
    data = export(
        [
            GO,
            ("Items", "set", (200, 0), {}),
            ("Call", "httpRequest", (400, 0), {"onError": "continueRegularOutput"}),
            (
                "Once",
                "httpRequest",
                (400, 200),
                {"onError": "continueRegularOutput", "executeOnce": True},
            ),
            ("Ok", "set", (600, 0), {}),
        ],
        [
            ("Go", 0, "Items", 0),
            ("Items", 0, "Call", 0),
            ("Items", 0, "Once", 0),
            ("Call", 0, "Ok", 0),
            ("Once", 0, "Ok", 0),
        ],
        order,
    )
    two = [item(id=1), item(id=2)]
    calls, _ = run(data, {"Items": lambda inputs, n: [two], "Call": _fails, "Once": _fails})
    error = item(error="quota exceeded")
    # v1: Call is higher on the canvas, so it and its Ok run first (depth first); legacy:
    # Call, Once, then the two Ok runs (breadth first) - the same order of Ok's runs
    assert (
        [(name, inputs) for name, inputs in calls if name != "Items"]
        == [("Call", [two]), ("Ok", [[error, error]]), ("Once", [two[:1]]), ("Ok", [[error]])]
        if order == "v1"
        else [("Call", [two]), ("Once", [two[:1]]), ("Ok", [[error, error]]), ("Ok", [[error]])]
    )


# -- 6. a finished v1 loop returns nothing: no waiting Merge is released -------------------------


@pytest.mark.parametrize("order", ORDERS)
def test_a_finished_v1_loop_returns_nothing_and_releases_no_waiting_merge(order: str) -> None:
    """Go -> If; If true -> M[0] and Loop (v1, batch 1); If false -> M[1]; Loop -> Body ->
    Loop; M -> After.

    v1: M waits for input 1; the loop hands ``[x]`` to Body, then SplitInBatchesV1 has no
    batch left and returns ``null``; ``processRunExecutionData`` then does ``continue
    executionLoop`` before it would release a waiting node, the stack is empty and the run
    ends: M and After never run. Legacy: the empty false output is added to M's input 1
    (``index > 0``), so M runs at once with ``[[x], []]``, breadth first between the loop's
    steps. Before, v1 released M once the loop ended."""
    data = export(
        [
            GO,
            ("If", "if", (200, 0), {}),
            ("M", "merge", (400, 0), {}),
            ("Loop", "splitInBatches", (400, 200), {"parameters": {"batchSize": 1}}),
            ("Body", "set", (600, 200), {}),
            ("After", "set", (600, 0), {}),
        ],
        [
            ("Go", 0, "If", 0),
            ("If", 0, "M", 0),
            ("If", 0, "Loop", 0),
            ("If", 1, "M", 1),
            ("Loop", 0, "Body", 0),
            ("Body", 0, "Loop", 0),
            ("M", 0, "After", 0),
        ],
        order,
    )
    x, body = item(x=1), item(by="Body")
    calls, status = run(
        data,
        {
            "If": lambda inputs, n: [[x], []],
            "Body": lambda inputs, n: [[body]],
            "M": lambda inputs, n: [inputs[0] + inputs[1]],
        },
    )
    if order == "v1":
        assert calls == [("If", [[item()]]), ("Body", [[x]])]
    else:
        assert calls == [("If", [[item()]]), ("M", [[x], []]), ("Body", [[x]]), ("After", [[x]])]
    assert status == "done"


# -- the legacy order runs a Merge's missing parents ---------------------------------------------


def test_the_legacy_order_runs_the_parent_of_a_merges_other_input_with_an_empty_item() -> None:
    """Go -> If; If true -> T -> M[0]; If false -> F -> M[1]; M -> After, legacy order.

    When T's items first reach M, ``addNodeToBeExecuted`` (``isLegacyExecutionOrder``) looks
    at M's other input: F did not run and is not on the stack, its parent If ran but sent F
    nothing (``incomingConnectionIsEmpty``), so F is added with one empty item; M then runs
    with both. In v1 F never runs and M runs with ``[items, []]`` once the stack is empty."""
    nodes = [
        GO,
        ("If", "if", (200, 0), {}),
        ("T", "set", (400, 0), {}),
        ("F", "set", (400, 200), {}),
        ("M", "merge", (600, 100), {}),
        ("After", "set", (800, 100), {}),
    ]
    wires = [
        ("Go", 0, "If", 0),
        ("If", 0, "T", 0),
        ("If", 1, "F", 0),
        ("T", 0, "M", 0),
        ("F", 0, "M", 1),
        ("M", 0, "After", 0),
    ]
    x, t, f = item(x=1), item(by="T"), item(by="F")
    answers: dict[str, Callable[[list[Items], int], list[Items]]] = {
        "If": lambda inputs, n: [[x], []],
        "T": lambda inputs, n: [[t]],
        "F": lambda inputs, n: [[f]],
        "M": lambda inputs, n: [inputs[0] + inputs[1]],
    }
    calls, _ = run(export(nodes, wires, "legacy"), answers)
    assert calls == [
        ("If", [[item()]]),
        ("T", [[x]]),
        ("F", [[item()]]),
        ("M", [[t], [f]]),
        ("After", [[t, f]]),
    ]
    calls, _ = run(export(nodes, wires, "v1"), answers)
    assert calls == [("If", [[item()]]), ("T", [[x]]), ("M", [[t], []]), ("After", [[t]])]


# -- the runaway export's shape: n8n stops after the extract -------------------------------------


def _zip_of_one_pdf(order: str) -> dict[str, Any]:
    """The shape of zie619 Code_1765 (invoice zips): Unzip -> Loop (v3) -loop-> Switch;
    Switch PDF -> Create PDF -> Join[0] and -> Extract PDF -> Append[0]; Switch XML ->
    Extract XML -> Append[1]; Append -> Agent -> Join[1]; Join -> Update -> Loop;
    Loop -done-> End."""
    merge = {"typeVersion": 3, "parameters": {}}
    return export(
        [
            GO,
            ("Unzip", "compression", (200, 0), {}),
            ("Loop", "splitInBatches", (400, 0), {"typeVersion": 3, "parameters": {}}),
            (
                "Switch",
                "switch",
                (600, 100),
                {"typeVersion": 3, "parameters": {"rules": {"values": [{}, {}]}}},
            ),
            ("Create PDF", "googleDrive", (800, -100), {}),
            ("Extract PDF", "extractFromFile", (800, 100), {}),
            ("Extract XML", "extractFromFile", (800, 300), {}),
            ("Append", "merge", (1000, 200), merge),
            ("Agent", "code", (1200, 200), {}),
            ("Join", "merge", (1400, 0), merge),
            ("Update", "googleSheets", (1600, 0), {}),
            ("End", "noOp", (600, -200), {}),
        ],
        [
            ("Go", 0, "Unzip", 0),
            ("Unzip", 0, "Loop", 0),
            ("Loop", 1, "Switch", 0),
            ("Loop", 0, "End", 0),
            ("Switch", 0, "Create PDF", 0),
            ("Switch", 0, "Extract PDF", 0),
            ("Switch", 1, "Extract XML", 0),
            ("Extract PDF", 0, "Append", 0),
            ("Extract XML", 0, "Append", 1),
            ("Append", 0, "Agent", 0),
            ("Agent", 0, "Join", 1),
            ("Create PDF", 0, "Join", 0),
            ("Join", 0, "Update", 0),
            ("Update", 0, "Loop", 0),
        ],
        order,
    )


@pytest.mark.parametrize("order", ORDERS)
def test_a_zip_holding_only_a_pdf_stops_after_the_extract_as_in_n8n(order: str) -> None:
    """After the Switch sends the one PDF on output 0, Create PDF and Extract PDF run; then
    Append waits for its XML input and Join for the Agent. v1: with the stack empty,
    ``parentIsWaiting`` holds both back (Join is upstream of Append round the loop, Append
    upstream of Join), so nothing runs and the execution ends (the real export is v1).
    Legacy (breadth first): when Create PDF's items reach Join, the walk up from Join's other
    parent (Agent, Append, ...) meets Extract PDF on the stack, so nothing is forced; when
    Extract PDF's items reach Append, its other parent Extract XML did not run and the
    Switch sent it nothing (``incomingConnectionIsEmpty``), so Extract XML runs with one
    empty item, completing Append; the loop goes round once and is done. Before, the machine
    released the Merges and went round the loop writing the sheet again and again within one
    event."""
    pdf = item(file="invoice.pdf")
    calls, status = run(
        _zip_of_one_pdf(order),
        {"Unzip": lambda inputs, n: [[pdf]], "Switch": lambda inputs, n: [[pdf], []]},
    )
    if order == "v1":  # the lower Extract PDF is added first, so the upper Create PDF runs first
        assert names(calls) == ["Unzip", "Switch", "Create PDF", "Extract PDF"]
    else:
        assert names(calls) == [
            "Unzip",
            "Switch",
            "Create PDF",
            "Extract PDF",
            "Extract XML",
            "Append",
            "Agent",
            "Join",
            "Update",
        ]
        assert calls[4] == ("Extract XML", [[item()]])
    assert status == "done"


# -- no runaway: a run that keeps calling nodes inside one event is stopped by a count -----------


@pytest.mark.parametrize("order", ORDERS)
def test_a_run_calling_nodes_without_end_is_stopped_by_a_count_naming_the_loop(order: str) -> None:
    """Go -> Fetch -> Page -> Page (wired to itself; it always returns an item): n8n calls
    Page for ever. The machine counts the node runs since the run last took anything in and
    past ``flow.max_runs`` fails in ``loops_forever`` naming the nodes going round."""
    data = export(
        [GO, ("Fetch", "set", (200, 0), {}), ("Page", "httpRequest", (400, 0), {})],
        [("Go", 0, "Fetch", 0), ("Fetch", 0, "Page", 0), ("Page", 0, "Page", 0)],
        order,
    )
    result = from_n8n(data, "w")
    result.primary.config["context"]["n8n"]["flow"]["max_runs"] = 40
    stubs = Script({"Page": lambda inputs, n: [[item(page=n)]]})
    actor = create_actor(
        stub_machine(result, stubs, widths_of(data)), clock=SimulatedClock()
    ).start()
    actor.send("GO")
    snapshot = actor.get_snapshot()
    assert (snapshot.status, snapshot.value) == ("error", "loops_forever")
    assert "runaway: 41 node runs" in str(snapshot.error)
    assert "going round 'Page' (40x)" in str(snapshot.error)
    assert len(stubs.calls) == 41  # Fetch once, Page 40 times: bounded by work, not time
