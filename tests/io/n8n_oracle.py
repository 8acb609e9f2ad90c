"""An n8n execution model, the oracle the imported machines are checked against.

``n8n_run`` interprets an export the way n8n's ``WorkflowExecute`` does with execution order
v1, written here from n8n's code independently of the importer's builder: one node at a
time from a stack; after a node, the targets of every output that produced items are sorted
with n8n's comparator (bottom-most first, as V8 sorts) and each is put on the front of the
stack (depth first, top-left first); a node with several wired inputs waits until each has
items; when the stack runs dry, the first waiting node whose ``requiredInputs`` arrived runs
with ``[]`` for the rest; disabled nodes pass their first input on; No Operation and Wait
pass their items on; Loop Over Items keeps its items between visits (v1/v2/v3 outputs); an If
asking ``noItemsLeft`` reads that memory; a failure stops the run, or continues with an error
item on the regular or the error output; Retry on Fail calls again; ``alwaysOutputData`` sends
one empty item when a node returned none.

Every other node is a ``Stubs`` call: it records the node and the items it got, and returns
items chosen from a seed (or fails). ``machine_run`` runs the imported statechart on the
engine with the same stubs; the two traces must be equal.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from statecharts import SimulatedClock, create_actor, create_machine
from statecharts.io.n8n import N8nImport
from statecharts.io.n8n import node_kinds as nk
from statecharts.io.n8n.graph import build_graph
from statecharts.io.n8n.node_kinds import Kind
from statecharts.io.n8n.outputs import regular_outputs
from statecharts.io.n8n.runtime import machine_config
from statecharts.io.n8n.validation import placeholder_implementations
from statecharts.io.n8n.workflow import parse_workflow

Items = list[dict[str, Any]]
Call = tuple[str, list[Items]]
BUDGET = 150  # node runs per trace; workflows that loop longer are compared on this prefix
ITEM_BUDGET = 5_000  # items out of one node run; below the machine's runaway bound


class OutOfBudget(Exception):
    """The trace is long enough; both sides stop calling here."""


class StubFailure(Exception):
    """A stub node failing on purpose."""


@dataclass
class Stubs:
    """Stand-ins for the nodes' work: call *n* of node *X* returns what ``seed`` decides,
    the same on both sides. ``fail_rate`` and ``empty_rate`` are per thousand."""

    seed: int
    fail_rate: int = 80
    empty_rate: int = 150
    calls: list[Call] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    on_budget: Callable[[], None] | None = None  # called once the budget is spent

    def _roll(self, *parts: Any) -> int:
        digest = hashlib.sha256(repr((self.seed, *parts)).encode()).digest()
        return int.from_bytes(digest[:4], "big") % 1000

    def call(self, node: str, inputs: list[Items], outputs: int) -> list[Items]:
        """Record the call and return one item list per output (raises ``StubFailure``)."""
        if len(self.calls) >= BUDGET:
            if self.on_budget is not None:
                self.on_budget()
            raise OutOfBudget(node)
        n = self.counts.get(node, 0)
        self.counts[node] = n + 1
        self.calls.append((node, [list(items) for items in inputs]))
        if outputs and self._roll(node, n, "fail") < self.fail_rate:
            raise StubFailure(f"{node} call {n} fails")
        got = sum(len(items) for items in inputs)
        result: list[Items] = []
        for output in range(outputs):
            if outputs == 1:
                empty = self._roll(node, n, "empty") < self.empty_rate
            else:
                empty = self._roll(node, n, output) < 500
            count = 1 + self._roll(node, n, output, "count") % 3
            result.append(
                []
                if empty
                else [
                    {"json": {"node": node, "call": n, "output": output, "got": got, "i": i}}
                    for i in range(count)
                ]
            )
        return result


@dataclass
class Trace:
    """What a run did: the stub calls in order and how it ended (``done``, ``error`` or
    ``budget`` when it was cut at ``BUDGET`` calls)."""

    calls: list[Call]
    status: str


# -- the oracle ---------------------------------------------------------------------------------

_NO_ITEMS_LEFT = re.compile(
    r"""\$(?:node\[\s*["']([^"']+)["']\s*\]|\(\s*["']([^"']+)["']\s*\))"""
    r"""\.context(?:\[\s*["']noItemsLeft["']\s*\]|\.noItemsLeft)"""
)


class _Workflow:
    """What ``WorkflowExecute`` reads of the workflow: ``connectionsBySourceNode``,
    ``connectionsByDestinationNode`` (main wires only), ``getParentNodes``,
    ``getChildNodes`` and the settings."""

    def __init__(self, data: Any, order: str | None) -> None:
        self.workflow = parse_workflow(data)
        self.graph = build_graph(self.workflow)
        self.nodes = {n.name: n for n in self.workflow.nodes}
        self.v1 = (order or self.workflow.execution_order) == "v1"
        skip = {n for n, k in self.graph.kinds.items() if k in (Kind.STICKY_NOTE, Kind.AI_SUBNODE)}
        # Workflow.__getConnectionsByDestination: by source in the export's order, by output
        self.by_source: dict[str, dict[int, list[tuple[str, int]]]] = {}
        self.by_destination: dict[str, dict[int, list[tuple[str, int]]]] = {}
        for wire in self.workflow.connections:
            if wire.kind != "main" or wire.source in skip or wire.target in skip:
                continue
            self.by_source.setdefault(wire.source, {}).setdefault(wire.output, []).append(
                (wire.target, wire.input)
            )
            self.by_destination.setdefault(wire.target, {}).setdefault(wire.input, []).append(
                (wire.source, wire.output)
            )

    def number_of_inputs(self, name: str) -> int:
        """``connectionsByDestinationNode[name].main.length``."""
        found = self.by_destination.get(name, {})
        return max(found) + 1 if found else 0

    def parents(self, name: str, checked: list[str] | None = None) -> list[str]:
        """``getParentNodes`` = common/get-connected-nodes.ts ``getConnectedNodes``."""
        if name not in self.by_destination:
            return []
        checked = list(checked or [])
        if name in checked:
            return []
        checked.append(name)
        found: list[str] = []
        for index in sorted(self.by_destination[name]):
            for source, _ in self.by_destination[name][index]:
                if source in checked:
                    continue
                found.insert(0, source)
                above = self.parents(source, checked)
                for i in range(len(above) - 1, -1, -1):
                    if above[i] in found:
                        found.remove(above[i])
                    found.insert(0, above[i])
        return found

    def children(self, name: str) -> set[str]:
        """``getChildNodes`` (as a set)."""
        seen: set[str] = set()
        todo = [name]
        while todo:
            for targets in self.by_source.get(todo.pop(), {}).values():
                for target, _ in targets:
                    if target not in seen and target != name:
                        seen.add(target)
                        todo.append(target)
        return seen


def _keys(names: Any) -> list[str]:
    """JavaScript's ``Object.keys`` order: array-index keys ascending, then insertion order."""
    names = list(names)
    numeric = [n for n in names if n.isdigit() and str(int(n)) == n and int(n) < 2**32 - 1]
    return sorted(numeric, key=int) + [n for n in names if n not in numeric]


def n8n_run(
    data: Any,
    start: str | None,
    stubs: Stubs,
    start_nodes: list[str] | None = None,
    order: str | None = None,
) -> Trace:
    """Run export ``data`` from trigger ``start`` (or, ``start`` None, from ``start_nodes``
    with one empty item each) as n8n's ``WorkflowExecute.processRunExecutionData`` would, in
    the export's execution order (or ``order``: ``"v1"``/``"legacy"``)."""
    wf = _Workflow(data, order)
    stack: list[dict[str, Any]] = []  # nodeExecutionStack: {node, main, source}
    waiting: dict[str, dict[int, dict[str, Any]]] = {}  # waitingExecution (+ its sources)
    run_data: dict[str, list[list[Items]]] = {}  # resultData.runData: outputs per run
    memory: dict[str, dict[str, Any]] = {}  # each node's getContext('node')

    def enqueue(item: dict[str, Any]) -> None:
        if wf.v1:
            stack.insert(0, item)  # unshift
        else:
            stack.append(item)  # push

    def incoming_is_empty(connections: list[tuple[str, int]], run_index: int) -> bool:
        for source, output in connections:
            runs = run_data.get(source, [])
            if run_index < len(runs) and output < len(runs[run_index]) and runs[run_index][output]:
                return False
        return True

    def add_node(
        target: str, index: int, output: int, parent: str, outputs: list[Items], run_index: int
    ) -> None:
        """``addNodeToBeExecuted``."""
        if wf.number_of_inputs(target) > 1:
            was_waiting = target in waiting
            rounds = waiting.setdefault(target, {})
            slot = next((k for k in sorted(rounds) if rounds[k]["main"][index] is None), None)
            if slot is None:
                slot = len(rounds)
                rounds[slot] = {
                    "main": [None] * wf.number_of_inputs(target),
                    "source": [None] * wf.number_of_inputs(target),
                }
            rounds[slot]["main"][index] = outputs[output]
            rounds[slot]["source"][index] = parent
            if all(got is not None for got in rounds[slot]["main"]):
                enqueue(
                    {"node": target, "main": rounds[slot]["main"], "source": rounds[slot]["source"]}
                )
                del rounds[slot]
                if not rounds:
                    del waiting[target]
                return
            if was_waiting or wf.v1:
                return
            siblings = [t for targets in wf.by_source.get(parent, {}).values() for t, _ in targets]
            for input_index in range(wf.number_of_inputs(target)):
                for source, _ in wf.by_destination[target].get(input_index, []):
                    if source == parent:
                        continue
                    on_stack = [item["node"] for item in stack]
                    if source in siblings and not incoming_is_empty(
                        wf.by_destination.get(source, {}).get(0, []), run_index
                    ):
                        continue
                    if source in on_stack or source in run_data:
                        continue
                    parents = [*wf.parents(source), source]
                    parents.reverse()
                    to_add: str | None = source
                    for name in parents:
                        if source != name and name in siblings:
                            to_add = None
                            break
                        if name in on_stack:
                            to_add = None
                            break
                        if name in run_data:
                            break
                        to_add = name
                    if to_add is not None and parent in wf.parents(to_add) and not outputs[output]:
                        to_add = None
                    if to_add is None:
                        continue
                    if to_add not in wf.by_destination or incoming_is_empty(
                        wf.by_destination[to_add].get(0, []), run_index
                    ):
                        enqueue({"node": to_add, "main": [[{"json": {}}]], "source": [parent]})
            return
        enqueue({"node": target, "main": [outputs[output]], "source": [parent]})

    def release() -> None:
        """The end of the execution loop: the stack is empty, waiting nodes remain."""
        names = _keys(waiting)
        i = 0
        while i < len(names):
            name = names[i]
            node = wf.nodes[name]
            required = _required_inputs(node) if wf.v1 else None
            if required == "all":
                i += 1
                continue
            if any(p in names for p in wf.parents(name)):
                i += 1
                continue
            first = sorted(waiting[name], key=str)[0]
            main = waiting[name][first]["main"]
            have = [k for k, got in enumerate(main) if got is not None]
            if (isinstance(required, list) and not all(k in have for k in required)) or (
                isinstance(required, int) and len(have) < required
            ):
                i += 1
                continue
            task = [got if got is not None else [] for got in main]
            added = any(task)
            if added:
                task += [[] for _ in range(_declared_inputs(node) - len(task))]
                stack.append(
                    {"node": name, "main": task, "source": list(waiting[name][first]["source"])}
                )
            del waiting[name][first]
            if not waiting[name]:
                del waiting[name]
            if added:
                return
            names, i = _keys(waiting), 0

    def input_data(item: dict[str, Any]) -> Items | None:
        """``prepareConnectionInputData`` (None: the node does not run)."""
        main = item["main"]
        if not main:
            return None
        chosen = main[0]
        if wf.v1:
            chosen = next((got for got in main if got), chosen)
        elif not chosen and item["source"] and item["source"][0] is None:
            below = wf.children(item["node"])
            for k, got in enumerate(main):
                previous = item["source"][k] if k < len(item["source"]) else None
                if got and previous is not None and (previous == item["node"] or previous in below):
                    chosen = got
                    break
        return chosen or None

    def schedule(name: str, outputs: list[Items], run_index: int) -> None:
        """After a node ran: the targets of its outputs, v1 sorted top-left first."""
        chosen = [
            (output, target, index)
            for output, targets in sorted(wf.by_source.get(name, {}).items())
            for target, index in targets
            if output < len(outputs) and (outputs[output] or (index > 0 and not wf.v1))
        ]
        if wf.v1:
            chosen = _v8_sort(chosen, lambda c: wf.nodes[c[1]].position)
        for output, target, index in chosen:
            add_node(target, index, output, name, outputs, run_index)

    if start is not None:  # the trigger ran and returned one empty item
        run_data[start] = [[[{"json": {}}]]]
        schedule(start, [[{"json": {}}]], 0)
    else:
        roots = start_nodes or []
        for name in _v8_sort(roots, lambda n: wf.nodes[n].position) if wf.v1 else roots:
            enqueue({"node": name, "main": [[{"json": {}}]], "source": [None]})
    runs = 0
    while stack:
        item = stack.pop(0)
        name = item["node"]
        node = wf.nodes[name]
        runs += 1
        if runs > 4 * BUDGET:
            return Trace(stubs.calls, "budget")
        run_index = len(run_data.get(name, []))
        main = item["main"]
        try:
            if node.disabled:  # handleDisabledNode
                outputs: list[Items] | None = [main[0]] if main and main[0] is not None else None
            elif input_data(item) is None:
                outputs = None
            else:
                if node.execute_once:  # handleExecuteOnce
                    main = [got[:1] for got in main]
                outputs = _execute(
                    node,
                    wf.graph.kinds[name],
                    main,
                    wf.number_of_inputs(name),
                    stubs,
                    memory,
                    wf.graph.wires.get(name, []),
                )
            if node.always_output_data and not (outputs and outputs[0]):
                # ensureAlwaysOutputData, after runNode, also when it returned null
                outputs = [[{"json": {}}], *(outputs or [[]])[1:]]
        except OutOfBudget:
            return Trace(stubs.calls, "budget")
        except StubFailure as exc:  # the node caught each item: onError decides
            mode = nk.error_mode(node)
            if mode == "stopWorkflow":
                return Trace(stubs.calls, "error")
            width = _regular_count(node, wf.graph.wires.get(name, []))
            first = (main[0] if main and main[0] is not None else []) or [{"json": {}}]
            if node.execute_once:
                first = first[:1]
            if mode == "continueRegularOutput":
                outputs = [[{"json": {"error": str(exc)}} for _ in first]] + [
                    [] for _ in range(width - 1)
                ]
            else:  # handleNodeErrorOutput: the paired input item's fields, then `error`
                outputs = [[] for _ in range(width)] + [
                    [{"json": {**got.get("json", {}), "error": str(exc)}} for got in first]
                ]
        except NodeStops:
            return Trace(stubs.calls, "error")
        if outputs is None:
            continue  # `continue executionLoop`: no runData, no waiting node released
        if sum(len(got) for got in outputs) > ITEM_BUDGET:
            return Trace(stubs.calls, "budget")  # items doubling round a loop, as in n8n
        run_data.setdefault(name, []).append(outputs)
        schedule(name, outputs, run_index)
        if not stack and waiting:
            release()
    return Trace(stubs.calls, "done")


class NodeStops(Exception):
    """Stop and Error: the run fails, whatever the node's onError says."""


def _required_inputs(node: Any) -> Any:
    """The Merge node's ``requiredInputs``, compared as ``WorkflowExecute`` does with its
    ``inputs`` (V2: two; V3: an expression string, never equal): ``"all"`` when all are."""
    if node.type != "n8n-nodes-base.merge" or node.type_version < 2:
        return None
    if node.parameters.get("mode") != "chooseBranch":
        return 1
    return "all" if node.type_version < 3 else [0, 1]


def _declared_inputs(node: Any) -> int:
    if node.type == "n8n-nodes-base.merge":
        if node.type_version >= 3:
            number = node.parameters.get("numberInputs", 2)
            return int(number) if isinstance(number, int) and not isinstance(number, bool) else 2
        return 2
    return 1


def _regular_count(node: Any, wires: list[tuple[int, str, int]]) -> int:
    width = max((o + 1 for o, _, _ in wires), default=1)
    error = nk.error_mode(node) == "continueErrorOutput"
    return len(regular_outputs(node, width - 1 if error and width >= 2 else width).names)


def _execute(
    node: Any,
    kind: Kind,
    inputs: list[Items],
    slots: int,
    stubs: Stubs,
    memory: dict[str, dict[str, Any]],
    wires: list[tuple[int, str, int]],
) -> list[Items] | None:
    first = list(inputs[0]) if inputs and inputs[0] is not None else []
    width = _regular_count(node, wires)
    error_slot: list[Items] = [[]] if nk.error_mode(node) == "continueErrorOutput" else []
    if kind in (Kind.TRIGGER, Kind.ERROR_TRIGGER):
        return [first]  # executeTriggerNode, not in manual mode: the data passes through
    if kind in (Kind.NO_OP, Kind.WAIT, Kind.FORM_PAGE):
        return [first] + [[] for _ in range(width - 1)] + error_slot
    if kind is Kind.EXECUTE_WORKFLOW and not nk.sub_workflow_spec(node).waits:
        stubs.call(node.name, [first], 0)
        return [first, *error_slot]
    if kind is Kind.STOP_AND_ERROR:
        raise NodeStops(nk.stop_and_error_message(node) or "Stop and Error")
    if kind is Kind.LOOP:
        batches = _split_in_batches(node, first, memory)
        return None if batches is None else batches + error_slot
    if kind is Kind.IF:
        loop = _asks_no_items_left(node)
        if loop is not None:
            left = memory.get(loop, {}).get("noItemsLeft", False)
            return ([first, []] if left else [[], first]) + error_slot
    attempts = (nk.retry_policy(node) or {}).get("max_attempts", 1)
    for attempt in range(attempts):
        try:
            got = [x if x is not None else [] for x in inputs] if slots > 1 else [first]
            return stubs.call(node.name, got, width) + error_slot
        except StubFailure:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def _asks_no_items_left(node: Any) -> str | None:
    conditions = node.parameters.get("conditions")
    text = repr(conditions)
    match = _NO_ITEMS_LEFT.search(text)
    if match is None or text.count("noItemsLeft") != 1:
        return None
    loop = nk.no_items_left_loop(node)  # the same single-condition shape n8n users write
    return loop


def _split_in_batches(
    node: Any, items: Items, memory: dict[str, dict[str, Any]]
) -> list[Items] | None:
    """n8n's SplitInBatches V1/V2/V3 ``execute`` (nodes/SplitInBatches/v1..v3): a new start
    only when its context holds no items yet or ``options.reset`` is true (never again once
    done); V1 returns null once no batch is left."""
    version = node.type_version
    size = nk.loop_spec(node).batch_size
    options = node.parameters.get("options")
    reset = isinstance(options, dict) and options.get("reset") is True
    context = memory.setdefault(node.name, {})
    if "items" not in context or reset:
        batch, context["items"] = items[:size], items[size:]
        context["processed"] = []
    else:
        batch, context["items"] = context["items"][:size], context["items"][size:]
        if version >= 2:
            context["processed"] = context["processed"] + items
    context["noItemsLeft"] = not context["items"]
    if version < 2:
        return [batch] if batch else None
    loop, done = (batch, []) if batch else ([], context["processed"])
    return [loop, done] if version < 3 else [done, loop]


def _v8_sort(items: list[Any], position: Callable[[Any], tuple[float, float]]) -> list[Any]:
    """``Array.prototype.sort`` of V8 (TimSort: first run, then binary insertion) with n8n's
    comparator from ``WorkflowExecute`` ("top-left first")."""

    def cmp(a: Any, b: Any) -> int:
        pa, pb = position(a), position(b)
        if pa[1] < pb[1]:
            return 1
        if pa[1] > pb[1]:
            return -1
        if pa[0] > pb[0]:
            return -1
        return 0

    a = list(items)
    n = len(a)
    if n < 2:
        return a
    run = 2
    desc = cmp(a[1], a[0]) < 0
    prev = a[1]
    for i in range(2, n):
        order = cmp(a[i], prev)
        if (desc and order >= 0) or (not desc and order < 0):
            break
        prev = a[i]
        run += 1
    if desc:
        a[:run] = list(reversed(a[:run]))
    for start in range(run, n):
        pivot = a[start]
        left, right = 0, start
        while left < right:
            mid = left + ((right - left) >> 1)
            if cmp(pivot, a[mid]) < 0:
                right = mid
            else:
                left = mid + 1
        a[left + 1 : start + 1] = a[left:start]
        a[left] = pivot
    return a


# -- the imported machine on the engine ----------------------------------------------------------


def stub_machine(result: N8nImport, stubs: Stubs, widths: dict[str, int]) -> Any:
    """The imported primary machine with every node actor (and fire-and-forget action)
    calling ``stubs``; ``widths`` is each node's number of regular outputs."""
    impls = placeholder_implementations(result)
    actors = {i.name: i for i in result.implementations if i.kind == "actor" and not i.provided}
    node_of = {m.state: m.node for m in result.nodes if m.state}
    for name, impl in actors.items():
        multi = (impl.signature or "").startswith("inputs:")
        impls["actors"][name] = _actor(stubs, node_of[name], widths[node_of[name]], multi)
    for impl in result.implementations:
        if impl.kind == "action" and not impl.provided:
            impls["actions"][impl.name] = _recording_action(stubs, impl.node or impl.name)
        if impl.kind == "delay":
            impls["delays"][impl.name] = lambda context, event: 1000
    return create_machine(
        machine_config(result.config),
        guards=impls["guards"],
        actions=impls["actions"],
        actors=impls["actors"],
        delays=impls["delays"],
    )


def widths_of(data: Any) -> dict[str, int]:
    """Each node's number of regular outputs (what its stub returns)."""
    graph = build_graph(parse_workflow(data))
    return {n.name: _regular_count(n, graph.wires.get(n.name, [])) for n in graph.workflow.nodes}


def machine_run(
    result: N8nImport, event: str | None, stubs: Stubs, widths: dict[str, int]
) -> Trace:
    """Run the imported primary machine: send ``event`` (None: it starts at once), fire its
    timers and answer its waits, with every node actor calling ``stubs``."""
    machine = stub_machine(result, stubs, widths)
    clock = SimulatedClock()
    actor = create_actor(machine, clock=clock).start()
    # the engine takes a stub's OutOfBudget for the node failing: where an error output goes
    # on round a loop, the run would go on inside one send for ever, so the budget stops it
    stubs.on_budget = actor.stop
    if event is not None:
        actor.send(event)
    # each round resumes at least one node (the timers falling due next, or a wait answered),
    # so the rounds are cut where the oracle cuts its node runs: a loop through a Wait
    # (calling no stub) that n8n would run for ever ends here as it does there (before, one
    # hour's advance fired 3,600 rounds of a 1 s Wait, and a round's cost grows with the
    # Merges left waiting)
    for _ in range(4 * BUDGET):
        snapshot = actor.get_snapshot()
        if snapshot.status != "active" or len(stubs.calls) >= BUDGET:
            break
        waiting = _waiting_event(result.config, snapshot.value)
        if waiting is not None:
            actor.send(waiting)
        else:
            clock.set(clock.next_due() or clock.now() + 3_600_000)
    snapshot = actor.get_snapshot()
    if len(stubs.calls) >= BUDGET or snapshot.status == "active":
        return Trace(stubs.calls[:BUDGET], "budget")
    return Trace(stubs.calls, "done" if snapshot.status == "done" else snapshot.status)


def _actor(stubs: Stubs, node: str, outputs: int, multi: bool) -> Callable[[Any], Any]:
    def work(data: Any) -> Any:
        inputs = [list(x) for x in data] if multi else [list(data or [])]
        result = stubs.call(node, inputs, outputs)
        return result if outputs > 1 else result[0]

    return work


def _recording_action(stubs: Stubs, node: str) -> Callable[..., None]:
    def record(context: Any, event: Any, **params: Any) -> None:
        from statecharts.io.n8n.execution import current

        entry = current(context)
        stubs.call(node, [list(entry[1][0]) if entry and entry[1] else []], 0)

    return record


def _waiting_event(config: dict[str, Any], value: Any) -> str | None:
    key = value if isinstance(value, str) else None
    if key is None:
        return None
    state = config["states"].get(key, {})
    events = list((state.get("on") or {}).keys())
    return events[0] if events and not state.get("after") else None


def compare(data: Any, result: N8nImport, seed: int) -> list[str]:
    """Run every entry of ``result`` against the oracle with stubs from ``seed``; the list of
    differences (empty: the machine did what n8n does)."""
    graph = build_graph(parse_workflow(data))
    widths = widths_of(data)
    problems = []
    for event, trigger, roots in entries(result, graph):
        expected = n8n_run(data, trigger, Stubs(seed), roots)
        actual = machine_run(result, event, Stubs(seed), widths)
        difference = _difference(expected, actual)
        if difference:
            problems.append(f"{event or 'start'}: {difference}")
    return problems


def _difference(expected: Trace, actual: Trace) -> str | None:
    for i, (want, got) in enumerate(zip(expected.calls, actual.calls, strict=False)):
        if want != got:
            return (
                f"call {i}: n8n runs {want[0]!r} with {_count(want)} items, the machine "
                f"{got[0]!r} with {_count(got)}"
            )
    shorter = min((expected, actual), key=lambda trace: len(trace.calls))
    if len(expected.calls) != len(actual.calls) and shorter.status != "budget":
        # a side cut by its budget (the oracle after 4 * BUDGET node runs, most of which
        # called nothing) did not end there: the other going on is no difference
        extra = (expected.calls if len(expected.calls) > len(actual.calls) else actual.calls)[
            min(len(expected.calls), len(actual.calls))
        ]
        return (
            f"n8n makes {len(expected.calls)} calls ({expected.status}), the machine "
            f"{len(actual.calls)} ({actual.status}); first extra: {extra[0]!r}"
        )
    if expected.status != actual.status and "budget" not in (expected.status, actual.status):
        return f"n8n ends {expected.status}, the machine {actual.status}"
    return None


def _count(call: Call) -> str:
    return "+".join(str(len(items)) for items in call[1])


def entries(result: N8nImport, graph: Any) -> list[tuple[str | None, str | None, list[str] | None]]:
    """(event, trigger node, start nodes) for every way the primary machine starts; which
    nodes a run started by hand begins at is read from the machine's start transition."""
    config = result.config
    initial = config["states"][config["initial"]]
    found: list[tuple[str | None, str | None, list[str] | None]] = []
    triggers = {
        m.how.split("event ")[1].split(" ")[0]: m.node
        for m in result.nodes
        if m.how.startswith("trigger: event ")
    }
    for event, leave in (initial.get("on") or {}).items():
        if event in triggers:
            found.append((event, triggers[event], None))
        else:
            found.append((event, None, _start_nodes(config, leave[-1]["actions"][0])))
    if not found and "entry" in initial:
        error_triggers = [
            m.node
            for m in result.nodes
            if m.how.startswith(("Error Trigger", "sub-workflow trigger"))
        ]
        if error_triggers:
            found.append((None, error_triggers[0], None))
        else:
            found.append((None, None, _start_nodes(config, initial["entry"][0])))
    return found


def _start_nodes(config: dict[str, Any], route: dict[str, Any]) -> list[str]:
    graph = config["context"]["n8n"]["graph"]
    return [child[1] for child in graph[route["params"]["route"]]["children"]]
