"""Fork and join shapes beyond the corpus's: small workflows written here, in n8n's export
format, run on the engine."""

from __future__ import annotations

from typing import Any

from statecharts.io.n8n import from_n8n
from tests.io.n8n_corpus import imported, state
from tests.io.n8n_runs import Run


def _workflow(nodes: list[tuple[str, str]], wires: list[tuple[str, int, str, int]]) -> Any:
    """An export with ``nodes`` as (name, type) and ``wires`` as (from, output, to, input)."""
    connections: dict[str, Any] = {}
    for source, output, target, index in wires:
        outputs = connections.setdefault(source, {"main": []})["main"]
        while len(outputs) <= output:
            outputs.append([])
        outputs[output].append({"node": target, "type": "main", "index": index})
    return {
        "nodes": [{"name": name, "type": f"n8n-nodes-base.{kind}", "typeVersion": 1,
                   "position": [i * 200, 0], "parameters": {}}
                  for i, (name, kind) in enumerate(nodes)],
        "connections": connections,
        "settings": {"executionOrder": "v1"},
    }


def test_a_fork_and_join_nested_inside_one_branch() -> None:
    # Start -> Split -> [A, J(1)]; A -> [B, C]; B -> M(0); C -> M(1); M -> D -> J(0); J -> E
    data = _workflow(
        [("Start", "manualTrigger"), ("Split", "set"), ("A", "set"), ("B", "set"),
         ("C", "set"), ("M", "merge"), ("D", "set"), ("J", "merge"), ("E", "set")],
        [("Start", 0, "Split", 0), ("Split", 0, "A", 0), ("Split", 0, "J", 1),
         ("A", 0, "B", 0), ("A", 0, "C", 0), ("B", 0, "M", 0), ("C", 0, "M", 1),
         ("M", 0, "D", 0), ("D", 0, "J", 0), ("J", 0, "E", 0)])
    result = from_n8n(data, "w")
    outer = state(result, "split_fork")
    assert outer["onDone"] == "#w.j"
    assert outer["states"]["branch_2"]["initial"] == "at_j"
    inner = state(result, "split_fork.branch_1.a_fork")
    assert inner["onDone"] == "#w.split_fork.branch_1.m"  # the inner join stays in branch 1
    assert state(result, "split_fork.branch_1.d")["invoke"]["onDone"] == \
        "#w.split_fork.branch_1.at_j"
    run = Run(result)
    run.actor.send("START")
    names = run.names()
    assert sorted(names) == ["a", "b", "c", "d", "e", "j", "m", "split"]
    assert names.index("m") > max(names.index("b"), names.index("c"))
    assert names[-2:] == ["j", "e"]
    assert run.snapshot.status == "done"


def test_branches_that_meet_at_a_plain_node_join_there_with_a_warning() -> None:
    # Error_1777: the Error Trigger feeds 'Insert Log' and 'Count for 5 minutes'; both lead on
    # to the Code node 'CleanUp execution...' (no Merge): it becomes the join
    result = imported("zie619__Error_1777")
    assert result.error_config is not None
    fork = result.error_config["states"]["error_trigger_fork"]
    assert fork["onDone"] == "#w_error.cleanup_execution_see_below_if_you_will"
    assert any("'CleanUp execution. See below if you will prepend this workflow' is reached "
               "from 2 parallel branches" in w for w in result.warnings)


def test_a_branch_that_ends_without_reaching_the_join() -> None:
    # Start -> Split -> [A, M(1)]; A -> If; If true -> M(0), false -> nothing
    data = _workflow(
        [("Start", "manualTrigger"), ("Split", "set"), ("A", "set"), ("If", "if"),
         ("M", "merge"), ("After", "set")],
        [("Start", 0, "Split", 0), ("Split", 0, "A", 0), ("Split", 0, "M", 1),
         ("A", 0, "If", 0), ("If", 0, "M", 0), ("M", 0, "After", 0)])
    result = from_n8n(data, "w")
    choice = state(result, "split_fork.branch_1.if")["always"]
    assert choice[0]["target"] == "#w.split_fork.branch_1.at_m"
    assert choice[1]["target"] == "#w.split_fork.branch_1.branch_done"
    for answer in (True, False):
        run = Run(result, guards={"if": lambda context, event, a=answer: a})
        run.actor.send("START")
        # either way the join goes on once both branches are over (n8n v1 runs a Merge that
        # got only one input too)
        assert run.names() == ["split", "a", "m", "after"]
        assert run.snapshot.status == "done"


def test_node_names_never_shadow_the_provided_implementations() -> None:
    # an If called "batches exhausted" next to a real loop, a Code node called
    # "n8n stop and error" and a Stop and Error node: each keeps its own implementation
    data = _workflow(
        [("Start", "manualTrigger"), ("Loop", "splitInBatches"), ("batches exhausted", "if"),
         ("n8n stop and error", "code"), ("Stop and Error", "stopAndError")],
        [("Start", 0, "Loop", 0), ("Loop", 0, "batches exhausted", 0),
         ("batches exhausted", 0, "n8n stop and error", 0),
         ("batches exhausted", 1, "Stop and Error", 0), ("n8n stop and error", 0, "Loop", 0)])
    for node in data["nodes"]:
        if node["name"] == "Loop":
            node["typeVersion"] = 3
    result = from_n8n(data, "w")
    own = {(i.kind, i.name) for i in result.implementations if not i.provided}
    assert ("guard", "batches_exhausted_2") in own
    assert ("actor", "n8n_stop_and_error_2") in own
    provided = {(i.kind, i.name) for i in result.implementations if i.provided}
    assert provided == {("guard", "batches_exhausted"), ("action", "take_next_batch"),
                        ("action", "reset_batches"), ("actor", "n8n_stop_and_error")}
    assert state(result, "stop_and_error")["invoke"]["src"] == "n8n_stop_and_error"
    run = Run(result, guards={"batches_exhausted_2": lambda context, event: False})
    run.actor.send("START")
    assert run.snapshot.status == "error"  # the If said no: Stop and Error failed the run
    assert "Stop and Error" in str(run.snapshot.error)
