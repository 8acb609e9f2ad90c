"""``from_n8n``: an n8n workflow export in, statechart configs and their hidden states out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .builder import Entry, MachineBuilder
from .graph import Graph, build_graph
from .mapping import HiddenState, Implementation, MachineImport, NodeMapping
from .naming import event_name, snake, unique
from .node_kinds import Kind
from .runtime import RESERVED
from .workflow import parse_workflow

SUB_WORKFLOW_TRIGGER = "n8n-nodes-base.executeWorkflowTrigger"
KEY_LENGTH = 40  # longer node names are cut (at a word) for state keys and implementation names


@dataclass(frozen=True)
class N8nImport:
    """The result of importing one workflow.

    ``config`` is the primary machine (XState v5 authoring shape, JSON types only);
    ``error_config`` the machine made of the workflow's Error Trigger part, when the workflow
    has both; ``hidden_states`` what n8n does silently, each with its node and reason;
    ``guards`` / ``actions`` / ``actors`` / ``delays`` the named implementations to write.
    """

    name: str
    primary: MachineImport
    error_machine: MachineImport | None
    error_workflow_id: str | None
    node_count: int
    sticky_notes: int
    nodes: tuple[NodeMapping, ...]
    warnings: tuple[str, ...]
    expression_nodes: tuple[str, ...] = ()

    @property
    def decisions(self) -> tuple[str, ...]:
        """What the engineer must decide or know, per node, for every machine."""
        return tuple(dict.fromkeys(d for m in self.machines for d in m.decisions))

    @property
    def config(self) -> dict[str, Any]:
        """The primary machine config."""
        return self.primary.config

    @property
    def error_config(self) -> dict[str, Any] | None:
        """The error machine config (started when a run fails), or None."""
        return self.error_machine.config if self.error_machine else None

    @property
    def machines(self) -> tuple[MachineImport, ...]:
        """The primary machine, then the error machine if any."""
        return (self.primary,) + ((self.error_machine,) if self.error_machine else ())

    @property
    def hidden_states(self) -> tuple[HiddenState, ...]:
        """The primary machine's hidden states."""
        return self.primary.hidden_states

    @property
    def state_count(self) -> int:
        """States of the primary machine (retry expansions included)."""
        return self.primary.state_count

    @property
    def implementations(self) -> tuple[Implementation, ...]:
        """Every named implementation of every machine, each name once per kind."""
        found: dict[tuple[str, str], Implementation] = {}
        for machine in self.machines:
            for impl in machine.implementations:
                found.setdefault((impl.kind, impl.name), impl)
        return tuple(found.values())

    def _of_kind(self, kind: str) -> tuple[Implementation, ...]:
        return tuple(i for i in self.implementations if i.kind == kind)

    @property
    def guards(self) -> tuple[Implementation, ...]:
        """Named guards the configs use."""
        return self._of_kind("guard")

    @property
    def actions(self) -> tuple[Implementation, ...]:
        """Named actions the configs use."""
        return self._of_kind("action")

    @property
    def actors(self) -> tuple[Implementation, ...]:
        """Named actors (one per node doing work) the configs invoke."""
        return self._of_kind("actor")

    @property
    def delays(self) -> tuple[Implementation, ...]:
        """Named delays (waits n8n computes at run time)."""
        return self._of_kind("delay")


def from_n8n(data: Any, name: str | None = None) -> N8nImport:
    """Import the parsed n8n export ``data``; ``name`` (default: the workflow's own name)
    becomes the machine id, in snake_case. Raises ``N8nFormatError`` naming the JSON path of
    anything malformed."""
    workflow = parse_workflow(data)
    graph = build_graph(workflow)
    machine_id = snake(name or workflow.name or "workflow", "workflow")
    keys: dict[str, str] = {}
    taken = set(RESERVED)  # a node never takes the name of a provided implementation
    for node in workflow.nodes:
        keys[node.name] = unique(snake(node.name, max_length=KEY_LENGTH), taken)
        taken.add(keys[node.name])
    events: set[str] = set()
    error_entries = [
        Entry(
            None,
            _wires(graph, n),
            (n,),
            n,
            f"Error Trigger: machine {machine_id}_error starts when a watched workflow's run fails",
        )
        for n in _in_order(graph, Kind.ERROR_TRIGGER)
    ]
    entries = _entries(graph, keys, events)
    meta: dict[str, Any] = {"workflow": workflow.name, "execution_order": workflow.execution_order}
    if workflow.error_workflow:
        meta["error_workflow"] = workflow.error_workflow
    error_machine = None
    if entries:
        primary = MachineBuilder(graph, machine_id, keys, events).build(
            entries, entries[0].event is not None, {"n8n": meta}
        )
        if error_entries:
            error_machine = MachineBuilder(graph, f"{machine_id}_error", keys, events).build(
                error_entries, False, {"n8n": {**meta, "role": "error workflow"}}
            )
    else:
        role = {"role": "error workflow"} if error_entries else {}
        primary = MachineBuilder(graph, machine_id, keys, events).build(
            error_entries, False, {"n8n": {**meta, **role}}
        )
    runnable = [n for n in workflow.nodes if not n.is_sticky_note]
    if workflow.execution_order != "v1":
        graph.warnings.append(
            "settings.executionOrder is the legacy order (v0): the machine "
            "runs it as n8n does, breadth first, and when a Merge first gets "
            "items it runs the parents of its other inputs that nothing "
            "else will run (with one empty item); switch to v1 in n8n and "
            "re-import if that is not what you want"
        )
    warnings = list(graph.warnings) + [w for m in (primary, error_machine) if m for w in m.warnings]
    return N8nImport(
        machine_id,
        primary,
        error_machine,
        workflow.error_workflow,
        len(runnable),
        len(workflow.nodes) - len(runnable),
        _all_mappings(graph, primary, error_machine),
        tuple(warnings),
        tuple(n.name for n in runnable if _has_expression(n.parameters)),
    )


def _in_order(graph: Graph, kind: Kind) -> list[str]:
    return [
        n.name
        for n in graph.workflow.nodes
        if graph.kinds[n.name] is kind and n.name not in graph.disabled
    ]


def _wires(graph: Graph, name: str) -> tuple[tuple[int, str, int], ...]:
    return tuple(graph.wires.get(name, ()))


def _entries(graph: Graph, keys: dict[str, str], events: set[str]) -> list[Entry]:
    """One entry per enabled trigger; nodes nothing leads to start runs by hand (``RUN``, or
    ``RUN_<NODE>`` next to triggers, since n8n then only runs them when asked to)."""
    entries = []
    triggers = _in_order(graph, Kind.TRIGGER)
    if triggers and all(graph.node(t).type == SUB_WORKFLOW_TRIGGER for t in triggers):
        return [
            Entry(
                None,
                _wires(graph, name),
                (name,),
                name,
                "sub-workflow trigger: the machine starts at once with the caller's "
                "items (its input) and its output is the last node's items",
            )
            for name in triggers
        ]
    for name in triggers:
        event = unique(event_name(keys[name]), events)
        events.add(event)
        entries.append(
            Entry(event, _wires(graph, name), (name,), name, f"trigger: event {event} starts a run")
        )
    roots = [
        n.name
        for n in graph.workflow.nodes
        if graph.runs(n.name)
        and graph.kinds[n.name] not in (Kind.TRIGGER, Kind.ERROR_TRIGGER)
        and n.name not in graph.disabled
        and not _fed(graph, n.name)
    ]
    if roots and not entries:
        events.add("RUN")
        return [Entry("RUN", tuple((0, root, 0) for root in roots), (), "run", "")]
    for root in roots:
        event = unique(f"RUN_{event_name(keys[root])}", events)
        events.add(event)
        entries.append(Entry(event, ((0, root, 0),), (), root, ""))
        graph.warnings.append(
            f"'{root}' has no incoming connection and no trigger leads to "
            f"it; n8n runs it only when started by hand: event {event}"
        )
    return entries


def _all_mappings(
    graph: Graph, primary: MachineImport, error_machine: MachineImport | None
) -> tuple[NodeMapping, ...]:
    """Every canvas node (sticky notes aside) once: where it went, or why it has no state."""
    found: dict[str, NodeMapping] = {}
    for machine in (primary, error_machine):
        if machine is None:
            continue
        for mapping in machine.nodes:
            if mapping.node not in found:
                prefix = "" if machine is primary else f"(machine {machine.machine_id}) "
                found[mapping.node] = NodeMapping(
                    mapping.node, mapping.type, mapping.state, prefix + mapping.how
                )
    result = []
    for node in graph.workflow.nodes:
        if node.is_sticky_note:
            continue
        if node.name in found:
            result.append(found[node.name])
        elif graph.kinds[node.name] is Kind.AI_SUBNODE:
            plugs = graph.attached_to.get(node.name, [])
            where = ", ".join(f"'{target}' ({kind})" for kind, target in plugs) or "nothing"
            result.append(
                NodeMapping(
                    node.name, node.type, None, f"AI sub-node: an attribute of {where}, not a state"
                )
            )
        elif node.name in graph.disabled:
            result.append(
                NodeMapping(
                    node.name,
                    node.type,
                    None,
                    "disabled: skipped (n8n passes its items straight through to its first output)",
                )
            )
        else:
            result.append(NodeMapping(node.name, node.type, None, _unreached(graph, node.name)))
    return tuple(result)


def _fed(graph: Graph, name: str) -> bool:
    """True when a wire from a node that can run leads into ``name`` (a disabled trigger
    starts nothing, so its wires do not count)."""
    return any(
        not (p in graph.disabled and graph.kinds[p] is Kind.TRIGGER)
        for p in graph.predecessors(name)
    )


def _unreached(graph: Graph, name: str) -> str:
    """Why a node got no state: only what the graph shows (a disabled trigger, no wire)."""
    feeders = [n for n in graph.predecessors(name)]
    if graph.kinds[name] in (Kind.TRIGGER, Kind.ERROR_TRIGGER):
        return "a disabled trigger: no entry, no state"
    if not feeders:
        return "no wire leads here and nothing starts here: no state"
    return (
        "reached only from nodes no enabled trigger or start node leads to ("
        + ", ".join(f"'{n}'" for n in feeders[:3])
        + "): no state"
    )


def _has_expression(value: Any) -> bool:
    """True when an n8n expression (``"={{ ... }}"``) is anywhere in ``value``."""
    if isinstance(value, str):
        return value.startswith("=")
    if isinstance(value, dict):
        return any(_has_expression(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_expression(v) for v in value)
    return False
