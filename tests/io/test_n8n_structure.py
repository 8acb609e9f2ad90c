"""Fork and join shapes beyond the corpus's: small workflows written here, in n8n's export
format, run on the engine."""

from __future__ import annotations

from typing import Any

from statecharts import SimulatedClock, create_actor, create_machine
from statecharts.io.n8n import from_n8n
from statecharts.io.n8n.runtime import machine_config
from statecharts.io.n8n.validation import placeholder_implementations
from tests.io.n8n_corpus import connections, imported, state
from tests.io.n8n_runs import Run, items, to_output


def _workflow(nodes: list[tuple[str, str]], wires: list[tuple[str, int, str, int]]) -> Any:
    """An export with ``nodes`` as (name, type) and ``wires`` as (from, output, to, input)."""
    return {
        "nodes": [
            {
                "name": name,
                "type": f"n8n-nodes-base.{kind}",
                "typeVersion": 1,
                "position": [i * 200, 0],
                "parameters": {},
            }
            for i, (name, kind) in enumerate(nodes)
        ],
        "connections": connections(wires),
        "settings": {"executionOrder": "v1"},
    }


def test_a_fork_and_join_nested_inside_one_branch_runs_depth_first() -> None:
    # Start -> Split -> [A, J(1)]; A -> [B, C]; B -> M(0); C -> M(1); M -> D -> J(0); J -> E
    data = _workflow(
        [
            ("Start", "manualTrigger"),
            ("Split", "set"),
            ("A", "set"),
            ("B", "set"),
            ("C", "set"),
            ("M", "merge"),
            ("D", "set"),
            ("J", "merge"),
            ("E", "set"),
        ],
        [
            ("Start", 0, "Split", 0),
            ("Split", 0, "A", 0),
            ("Split", 0, "J", 1),
            ("A", 0, "B", 0),
            ("A", 0, "C", 0),
            ("B", 0, "M", 0),
            ("C", 0, "M", 1),
            ("M", 0, "D", 0),
            ("D", 0, "J", 0),
            ("J", 0, "E", 0),
        ],
    )
    result = from_n8n(data, "w")
    assert all("." not in (m.state or "") for m in result.nodes)  # one flat state per node
    run = Run(result, outputs={"split": items({"s": 1}), "d": items({"d": 1}, {"d": 2})})
    run.actor.send("START")
    # B before C (same height: n8n's comparator puts the left-most first), M as soon as its
    # second input arrives, J once D has brought its input 0
    assert run.names() == ["split", "a", "b", "c", "m", "d", "j", "e"]
    assert run.inputs["j"] == [[items({"d": 1}, {"d": 2}), items({"s": 1})]]
    assert run.snapshot.status == "done"


def test_each_node_gets_the_items_its_input_produced() -> None:
    data = _workflow(
        [
            ("Start", "manualTrigger"),
            ("Fetch", "httpRequest"),
            ("Check", "if"),
            ("Yes", "set"),
            ("No", "set"),
        ],
        [
            ("Start", 0, "Fetch", 0),
            ("Fetch", 0, "Check", 0),
            ("Check", 0, "Yes", 0),
            ("Check", 1, "No", 0),
        ],
    )
    result = from_n8n(data, "w")
    fetched = items({"id": 1}, {"id": 2}, {"id": 3})
    run = Run(
        result,
        outputs={
            "fetch": fetched,
            # per item: odd ids go to output 0 (true), even ones to output 1 (false)
            "check": lambda got: [
                [i for i in got if i["json"]["id"] % 2],
                [i for i in got if not i["json"]["id"] % 2],
            ],
        },
    )
    run.actor.send("START")
    assert run.inputs["fetch"] == [[{"json": {}}]]  # the trigger's one empty item
    assert run.inputs["check"] == [fetched]
    # both outputs got items, so both branches run, true (output 0) first
    assert run.names() == ["fetch", "check", "yes", "no"]
    assert run.inputs["yes"] == [items({"id": 1}, {"id": 3})]
    assert run.inputs["no"] == [items({"id": 2})]
    # an output with no items stops its branch
    run = Run(result, outputs={"fetch": [], "check": [[], []]})
    run.actor.send("START")
    assert run.names() == ["fetch"] and run.snapshot.status == "done"


def test_branches_that_meet_at_a_plain_node_run_it_once_per_branch() -> None:
    # Error_1777: the Error Trigger feeds 'Insert Log' and 'Count for 5 minutes'; both lead on
    # to the Code node 'CleanUp execution...' (no Merge): n8n runs it once per arriving branch
    result = imported("zie619__Error_1777")
    assert result.error_config is not None
    cleanup = "cleanup_execution_see_below_if_you_will"
    assert cleanup in result.error_config["states"]
    paths = [m.state for m in result.nodes if m.node.startswith("CleanUp")]
    assert len(paths) == 1  # one state, reached from each branch


def _if_into_merge() -> Any:
    # Start -> Split -> [A, M(1)]; A -> If; If true -> M(0), false -> nothing
    return _workflow(
        [
            ("Start", "manualTrigger"),
            ("Split", "set"),
            ("A", "set"),
            ("If", "if"),
            ("M", "merge"),
            ("After", "set"),
        ],
        [
            ("Start", 0, "Split", 0),
            ("Split", 0, "A", 0),
            ("Split", 0, "M", 1),
            ("A", 0, "If", 0),
            ("If", 0, "M", 0),
            ("M", 0, "After", 0),
        ],
    )


def test_a_branch_that_ends_without_reaching_the_merge() -> None:
    # Start -> Split -> [A, M(1)]; A -> If; If true -> M(0), false -> nothing
    data = _if_into_merge()
    result = from_n8n(data, "w")
    for output in (0, 1):
        run = Run(result, outputs={"if": to_output(output)})
        run.actor.send("START")
        # either way the Merge runs: with both inputs, or (v1 order, nothing else left to
        # run) with the one that arrived and [] for the other
        assert run.names() == ["split", "a", "if", "m", "after"]
        got = run.inputs["m"][0]
        assert (got[0] != []) == (output == 0) and got[1] != []
        assert run.snapshot.status == "done"


def test_choose_branch_merge_never_runs_with_one_input() -> None:
    data = _if_into_merge()
    merge = next(n for n in data["nodes"] if n["name"] == "M")
    merge.update(typeVersion=3, parameters={"mode": "chooseBranch"})
    run = Run(from_n8n(data, "w"), outputs={"if": to_output(1)})
    run.actor.send("START")
    assert run.names() == ["split", "a", "if"]
    assert run.snapshot.status == "done"


def test_node_names_never_shadow_the_provided_implementations() -> None:
    # a Code node called "n8n route" and one called "n8n stop and error" next to a Stop and
    # Error node: each keeps its own implementation
    data = _workflow(
        [
            ("Start", "manualTrigger"),
            ("n8n route", "code"),
            ("Check", "if"),
            ("n8n stop and error", "code"),
            ("Stop and Error", "stopAndError"),
        ],
        [
            ("Start", 0, "n8n route", 0),
            ("n8n route", 0, "Check", 0),
            ("Check", 0, "n8n stop and error", 0),
            ("Check", 1, "Stop and Error", 0),
        ],
    )
    result = from_n8n(data, "w")
    own = {(i.kind, i.name) for i in result.implementations if not i.provided}
    assert ("actor", "n8n_route_2") in own
    assert ("actor", "n8n_stop_and_error_2") in own
    provided = {(i.kind, i.name) for i in result.implementations if i.provided}
    assert provided == {("action", "n8n_route"), ("actor", "n8n_stop_and_error")}
    assert state(result, "stop_and_error")["invoke"]["src"] == "n8n_stop_and_error"
    run = Run(result, outputs={"check": to_output(1)})
    run.actor.send("START")
    assert run.snapshot.status == "error"  # the If said no: Stop and Error failed the run
    assert "Stop and Error" in str(run.snapshot.error)


def test_execute_workflow_invokes_the_imported_sub_workflow_as_a_child_machine() -> None:
    # in memory: the child workflow's machine is the actor of the Execute Workflow node; it
    # starts with the caller's items and hands back its last node's items, as n8n does
    child = _workflow(
        [("Called", "executeWorkflowTrigger"), ("Double", "code"), ("Tail", "set")],
        [("Called", 0, "Double", 0), ("Double", 0, "Tail", 0)],
    )
    parent = _workflow(
        [
            ("Start", "manualTrigger"),
            ("Load", "set"),
            ("Call", "executeWorkflow"),
            ("After", "set"),
        ],
        [("Start", 0, "Load", 0), ("Load", 0, "Call", 0), ("Call", 0, "After", 0)],
    )
    child_import = from_n8n(child, "child")
    assert child_import.config["initial"] == "starting"  # no trigger wait: called directly
    impls = placeholder_implementations(child_import)
    impls["actors"]["double"] = lambda got: got + got
    impls["actors"]["tail"] = lambda got: got[-1:]
    child_machine = create_machine(machine_config(child_import.config), **impls)
    parent_import = from_n8n(parent, "parent")
    impls = placeholder_implementations(parent_import)
    recorded: list[Any] = []
    impls["actors"].update(
        load=lambda got: items({"n": 1}, {"n": 2}),
        call=child_machine,
        after=lambda got: recorded.append(got) or got,
    )
    actor = create_actor(
        create_machine(machine_config(parent_import.config), **impls), clock=SimulatedClock()
    ).start()
    actor.send("START")
    assert recorded == [items({"n": 2})]  # Double made 4 items, Tail kept the last
    assert actor.get_snapshot().status == "done"
    assert actor.get_snapshot().output == items({"n": 2})


def test_always_output_data_fills_output_0_even_when_another_output_has_items() -> None:
    # n8n's WorkflowExecute: `if (!nodeSuccessData?.[0]?.[0])` -> output 0 gets {json: {}}
    data = _workflow(
        [("Start", "manualTrigger"), ("Check", "if"), ("Yes", "set"), ("No", "set")],
        [("Start", 0, "Check", 0), ("Check", 0, "Yes", 0), ("Check", 1, "No", 0)],
    )
    next(n for n in data["nodes"] if n["name"] == "Check")["alwaysOutputData"] = True
    run = Run(from_n8n(data, "w"), outputs={"check": to_output(1)})
    run.actor.send("START")
    assert run.names() == ["check", "yes", "no"]
    assert run.inputs["yes"] == [[{"json": {}}]]
