"""The executable graph of a workflow: which nodes run, which wires carry items, and which
nodes merely plug into others (AI sub-nodes).

A disabled node stays in the graph: n8n still schedules it and passes the items of its first
input straight to its first output. Sticky notes are dropped; wires of a non-``main`` kind
(``ai_languageModel``, ``ai_tool``, ...) become attributes of the node they plug into.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property

from .node_kinds import Kind, kind_of, looks_like_ai_subnode
from .workflow import Node, Workflow


@dataclass
class Graph:
    """Main-wire successors per node and output, after removing sticky notes and AI
    sub-nodes; ``wires`` keeps each main wire as (output, target, target input)."""

    workflow: Workflow
    kinds: dict[str, Kind]
    outputs: dict[str, list[list[str]]]
    incoming: dict[str, int]
    sub_nodes: dict[str, dict[str, list[str]]]
    attached_to: dict[str, list[tuple[str, str]]]
    disabled: list[str]
    warnings: list[str] = field(default_factory=list)
    wires: dict[str, list[tuple[int, str, int]]] = field(default_factory=dict)

    def predecessors(self, name: str) -> list[str]:
        """Every node with a wire into ``name``."""
        return self._predecessors.get(name, [])

    @cached_property
    def _predecessors(self) -> dict[str, list[str]]:
        found: dict[str, dict[str, None]] = defaultdict(dict)
        for source, by_output in self.outputs.items():
            for targets in by_output:
                for target in targets:
                    found[target][source] = None
        return {target: list(sources) for target, sources in found.items()}

    def output_count(self, name: str) -> int:
        """How many outputs of ``name`` have wires slots in the export."""
        return len(self.outputs.get(name, []))

    def runs(self, name: str) -> bool:
        """True for nodes that become part of the statechart."""
        return self.kinds[name] not in (Kind.STICKY_NOTE, Kind.AI_SUBNODE)

    def node(self, name: str) -> Node:
        """The workflow node called ``name``."""
        return self.workflow.node(name)


def build_graph(workflow: Workflow) -> Graph:
    """The executable graph of ``workflow``."""
    nodes = {n.name: n for n in workflow.nodes}
    main: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    ai_out: dict[str, list[tuple[str, str]]] = defaultdict(list)
    has_main: set[str] = set()
    for wire in workflow.connections:
        if wire.kind == "main":
            main[wire.source][wire.output].append(wire.target)
            has_main.update((wire.source, wire.target))
        else:
            ai_out[wire.source].append((wire.kind, wire.target))
    kinds = {name: _kind(node, name in ai_out, name in has_main) for name, node in nodes.items()}
    disabled = [
        n.name
        for n in workflow.nodes
        if n.disabled and kinds[n.name] not in (Kind.STICKY_NOTE, Kind.AI_SUBNODE)
    ]
    skip = {n for n, k in kinds.items() if k in (Kind.STICKY_NOTE, Kind.AI_SUBNODE)}
    outputs: dict[str, list[list[str]]] = {}
    main_wires: dict[str, list[tuple[int, str, int]]] = defaultdict(list)
    for wire in workflow.connections:
        if wire.kind == "main" and wire.source not in skip and wire.target not in skip:
            main_wires[wire.source].append((wire.output, wire.target, wire.input))
    for name in nodes:
        if name in skip or name not in main:
            continue
        width = max(main[name]) + 1
        outputs[name] = [
            list(dict.fromkeys(t for t in main[name].get(i, []) if t not in skip))
            for i in range(width)
        ]
    incoming: dict[str, int] = defaultdict(int)
    for targets_by_output in outputs.values():
        for targets in targets_by_output:
            for target in targets:
                incoming[target] += 1
    sub_nodes: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    attached: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for source, wires in ai_out.items():
        for kind, target in wires:
            sub_nodes[target][kind].append(source)
            attached[source].append((kind, target))
    return Graph(
        workflow,
        kinds,
        outputs,
        dict(incoming),
        {k: dict(v) for k, v in sub_nodes.items()},
        dict(attached),
        disabled,
        list(workflow.warnings),
        dict(main_wires),
    )


def _kind(node: Node, plugs_into_others: bool, on_main_wires: bool) -> Kind:
    kind = kind_of(node)
    if (
        kind is Kind.WORK
        and not on_main_wires
        and (plugs_into_others or looks_like_ai_subnode(node))
    ):
        return Kind.AI_SUBNODE
    return kind
