"""From the executable graph to a statechart config (XState v5 authoring shape).

Every node that runs becomes one state at the top of the machine, whichever branches reach
it; the machine runs its nodes the way n8n's v1 execution order does (see ``execution``):
one at a time, each output's targets top-left first and depth first, a Merge once its
inputs are there. What n8n does silently around the nodes becomes extra, *hidden* states,
each recorded with the node it came from and why:

- the machine waits for one of its triggers (``waiting_for_trigger``, one event per trigger);
- a node that fails stops the run, unless its ``onError`` continues, in which case an
  explicit ``<node>_failed`` state sends the error item down the regular or the error output;
- Retry on Fail is an invoke with a ``retry`` policy that the engine expands into attempting /
  waiting-to-retry states;
- when a branch ends (no wire, or no items) n8n takes the next waiting branch off its stack:
  ``next_branch``; when nothing is left the run is ``done``;
- a "send and wait" node waits for its reply.

Targets are written as ``#<machine>.<key>`` ids.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...retrying import retry_steps
from . import node_kinds as nk
from .execution import MAX_RUNS
from .graph import Graph
from .mapping import HiddenState, Implementation, MachineImport, NodeMapping
from .naming import event_name, unique
from .node_kinds import Kind
from .outputs import Outputs, input_count, regular_outputs, required_inputs
from .workflow import N8nFormatError

MERGE = nk.BASE + "merge"
ROUTE = "n8n_route"
ITEMS_TYPE = "Items"


@dataclass(frozen=True)
class Entry:
    """How a run of the machine starts: an ``event`` (None: at once) whose items go to
    ``children`` (``[output, target, input]`` wires); ``nodes`` are the trigger nodes this
    entry stands for (mapped to no state); ``origin`` names the trigger or ``run``."""

    event: str | None
    children: tuple[tuple[int, str, int], ...]
    nodes: tuple[str, ...]
    origin: str
    why: str


class MachineBuilder:
    """Builds one machine from ``graph``; ``node_keys`` gives every node its state key."""

    def __init__(
        self, graph: Graph, machine_id: str, node_keys: dict[str, str], events: set[str]
    ) -> None:
        self.graph = graph
        self.machine_id = machine_id
        self.keys = node_keys
        self.all_keys = set(node_keys.values())
        self.states: dict[str, dict[str, Any]] = {}
        self.placed: set[str] = set()
        self.queue: deque[str] = deque()
        self.hidden: list[HiddenState] = []
        self.mappings: dict[str, NodeMapping] = {}
        self.impls: dict[tuple[str, str], Implementation] = {}
        self.warnings: list[str] = []
        self.decisions: list[str] = []
        self.events = set(events)  # trigger events already taken
        self.order = {n.name: n.index for n in graph.workflow.nodes}
        self.resumable: set[str] = set()
        self.routes: dict[str, dict[str, Any]] = {}
        self.idle: set[str] = set()  # nodes doing no work, when some of them form a loop
        self.forever_key: str | None = None
        self.forever_message = ""
        self.legacy = graph.workflow.execution_order != "v1"
        self.looping = False  # some wires lead round in a loop (see _runaway)
        self.done_key = unique("done", self.all_keys)
        self.next_key = unique("next_branch", self.all_keys | {self.done_key})
        self.all_keys |= {self.done_key, self.next_key}
        self._need(
            "action",
            ROUTE,
            None,
            "n8n's execution stack: schedules what a node "
            "produced and takes the next node off the stack",
            provided=True,
        )

    # -- the machine -----------------------------------------------------------------------------

    def build(
        self, entries: list[Entry], wait_for_trigger: bool, meta: dict[str, Any]
    ) -> MachineImport:
        """The machine whose runs start as ``entries`` say."""
        for name in [n.name for n in self.graph.workflow.nodes]:
            self._note_resumable(name)
        starts = [target for entry in entries for _, target, _ in entry.children]
        self._idle_loops(starts)
        self._runaway(starts)
        for entry in entries:
            if len(entry.children) > 1:
                self.resumable.update(target for _, target, _ in entry.children)
        if wait_for_trigger and entries:
            initial = self._trigger_wait(entries)
        elif entries:
            initial = self._start_at_once(entries)
        else:
            initial = self.done_key
            self.warnings.append(
                "nothing starts this workflow (no enabled trigger and no node "
                "without an incoming connection)"
            )
        while self.queue:
            self._build_node(self.queue.popleft())
        if self.legacy and self.resumable:
            # breadth first: once branches fork, any node may be the next one off the stack
            self.resumable |= self.placed
        self._end_states()
        config: dict[str, Any] = {
            "id": self.machine_id,
            "initial": initial,
            "context": {
                "n8n": {
                    "graph": self.routes,
                    "flow": self._flow(),
                    "stack": [],
                    "waiting": [],
                    "current": None,
                    "loops": {},
                    "runs": {},
                }
            },
            "states": self.states,
            # as an n8n sub-workflow returns: the last node's items
            "output": {"$n8n": "output"},
            "meta": meta,
        }
        return MachineImport(
            self.machine_id,
            config,
            _in_document_order(self.hidden, config),
            tuple(self.mappings[n] for n in sorted(self.mappings, key=self.order.__getitem__)),
            tuple(self.impls.values()),
            tuple(self.warnings),
            tuple(dict.fromkeys(self.decisions)),
        )

    def _note_resumable(self, name: str) -> None:
        """Nodes n8n may take off its stack after some other node ran: targets of a node
        with several wires out, and nodes with several inputs (released once they are
        complete, or when nothing else is left)."""
        wires = self.graph.wires.get(name, [])
        error = (
            len(self._output_names(name)) - 1
            if self.graph.runs(name)
            and nk.error_mode(self.graph.node(name)) == "continueErrorOutput"
            else None
        )
        # a failure sends items down the error output only, success never does
        for group in ([w for w in wires if w[0] != error], [w for w in wires if w[0] == error]):
            if len(group) > 1:
                self.resumable.update(target for _, target, _ in group)
        if self._slots(name) > 1:
            self.resumable.add(name)

    def _idle(self, name: str) -> bool:
        """True for a node whose state does no work: its route alone decides what it sends
        on (No Operation, a disabled node, Loop Over Items, an If asking "no items left?", and
        a Wait for a time interval: it only lets time pass, then sends its items on)."""
        if name in self.graph.disabled:
            return True
        kind = self.graph.kinds[name]
        if kind is Kind.WAIT:
            try:
                return nk.wait_spec(self.graph.node(name)).mode == "timeInterval"
            except N8nFormatError:
                return False  # imported as a generic node (see ``_state``), which does work
        return kind in (Kind.NO_OP, Kind.LOOP) or (
            kind is Kind.IF and self._asked_loop(name) is not None
        )

    def _idle_loops(self, starts: list[str]) -> None:
        """Wires that lead from nodes doing no work back to themselves: n8n passes items round
        such a loop until the items stop, or for ever (a disabled node wired to itself, a Loop
        Over Items whose alwaysOutputData refills its output, a Wait wired back to itself
        through a No Operation). In the machine the loop is eventless transitions (and
        timers), so the engine would stop it as an infinite loop (or it would wait for ever,
        its context growing with each Merge it feeds); instead its
        routes watch for the repeat (``execution._watch_idle``) and the run fails in the
        hidden state ``loops_forever``, naming the nodes."""
        reached = _reached(starts, self.graph.wires)
        idle = {name for name in reached if self._idle(name)}
        looping = sorted(
            (name for name in idle if _returns_to(name, self.graph.wires, idle)),
            key=self.order.__getitem__,
        )
        if not looping:
            return
        self.idle = idle
        self._forever_state()
        names = ", ".join(f"'{name}'" for name in looping)
        message = (
            f"n8n would run for ever: items go round {names}, a loop in which no node does any work"
        )
        self.forever_message = message
        verb = "forms" if len(looping) == 1 else "form"
        self.warnings.append(
            f"{names} {verb} a loop in which no node does any work: when items "
            "keep going round it (n8n would run it for ever) the run fails in "
            f"state '{self.forever_key}'"
        )

    def _forever_state(self) -> None:
        if self.forever_key is None:
            self.forever_key = unique("loops_forever", self.all_keys)
            self.all_keys.add(self.forever_key)

    def _runaway(self, starts: list[str]) -> None:
        """Where wires lead round in a loop, a run could call nodes without end inside one
        event (n8n would too, until someone stops the execution): the routes count the node
        runs since the run last took anything in (``execution._count_work``) and past
        ``context.n8n.flow.max_runs`` the run fails in ``loops_forever``, naming the nodes
        going round."""
        reached = _reached(starts, self.graph.wires)
        looping = [name for name in reached if _returns_to(name, self.graph.wires, reached)]
        if not looping:
            return
        self._forever_state()
        if not self.forever_message:
            self.forever_message = "runaway: n8n would call nodes without end"
        self.looping = True

    def _flow(self) -> dict[str, Any]:
        """The static part of n8n's execution the routes read: the order, every main wire
        by target (n8n's ``connectionsByDestinationNode``), the disabled nodes and the work
        bound of ``_runaway``."""
        sources: dict[str, list[list[Any]]] = {}
        for wire in self.graph.workflow.connections:  # in the export's order, as n8n reads it
            if (
                wire.kind == "main"
                and self.graph.runs(wire.source)
                and self.graph.runs(wire.target)
            ):
                sources.setdefault(wire.target, []).append([wire.source, wire.output, wire.input])
        return {
            "order": "legacy" if self.legacy else "v1",
            "sources": sources,
            "disabled": sorted(self.graph.disabled),
            "max_runs": MAX_RUNS,
        }

    def _trigger_wait(self, entries: list[Entry]) -> str:
        key = unique("waiting_for_trigger", self.all_keys)
        self.all_keys.add(key)
        on: dict[str, Any] = {}
        for entry in entries:
            assert entry.event is not None
            on[entry.event] = self._leave(
                entry.origin,
                {
                    "node": f"start:{entry.origin}",
                    "how": "start",
                    **self._trigger(entry),
                    "children": self._ordered(list(entry.children)),
                },
                f"on {entry.event}",
            )
            for name in entry.nodes:
                self._map(name, None, entry.why)
        self.states[key] = {"description": "waiting for a trigger", "on": on}
        triggers = ", ".join(sorted(on))
        self._hide(
            "trigger_wait",
            key,
            None,
            f"an n8n workflow sits idle until a trigger fires; each of its {len(on)} "
            f"entry point(s) is an event here: {triggers}",
        )
        return key

    def _start_at_once(self, entries: list[Entry]) -> str:
        key = unique("starting", self.all_keys)
        self.all_keys.add(key)
        children = [c for entry in entries for c in entry.children]
        params = {
            "node": "start:",
            "how": "start",
            "children": self._ordered(children),
            **(self._trigger(entries[0]) if len(entries) == 1 else {}),
        }
        self.states[key] = {
            "description": "the run starts at once",
            "entry": [self._route(params)],
            "always": self._resume([t for _, t, _ in children]),
        }
        for entry in entries:
            for name in entry.nodes:
                self._map(name, None, entry.why)
        self._hide(
            "run_start",
            key,
            None,
            "the run starts as soon as the machine does (an error workflow, or a "
            "workflow started by hand); the start node(s) get one empty item",
        )
        return key

    @staticmethod
    def _trigger(entry: Entry) -> dict[str, str]:
        """The trigger node a start route stands for (n8n records that it ran)."""
        return {"trigger": entry.nodes[0]} if len(entry.nodes) == 1 else {}

    def _end_states(self) -> None:
        if self.resumable or self.looping:
            always: list[Any] = [
                {
                    "guard": {"type": "current_node_is", "params": {"node": name}},
                    "target": self._id(name),
                    "description": f"resume '{name}'",
                }
                for name in sorted(self.resumable & self.placed, key=self.order.__getitem__)
            ]
            always.append({"target": self._ref(self.done_key), "description": "nothing left"})
            if self.forever_key is not None:
                always.insert(
                    0,
                    {
                        "guard": {"type": "loops_forever"},
                        "target": self._ref(self.forever_key),
                        "description": "the run goes round without end",
                    },
                )
            self.states[self.next_key] = {
                "description": "the next waiting branch",
                "always": always,
            }
            self._hide(
                "next_branch",
                self.next_key,
                None,
                "n8n keeps a stack of nodes waiting to run; when a branch ends (no "
                "wire, or no items) it runs the next one, depth first and top-left "
                "first, and a Merge once its inputs are there",
            )
        if self.forever_key is not None:
            self.states[self.forever_key] = {
                "description": "the run goes round without end",
                "tags": ["failed"],
                "invoke": {
                    "id": self.forever_key,
                    "src": self._fail_actor(),
                    "input": {"$n8n": "forever", "message": self.forever_message},
                    "description": "fail the run: it would never end",
                    "onFinalFailure": "fail_run",
                },
            }
            self._hide(
                "endless_loop",
                self.forever_key,
                None,
                "n8n keeps passing items round a loop (until someone stops the "
                "execution); the machine notices a loop of nodes doing no work "
                "repeating itself, or more than context.n8n.flow.max_runs node runs "
                f"(default {MAX_RUNS}) since the run last took anything in, and fails "
                "the run here, naming the nodes, instead of spinning",
            )
        self.states[self.done_key] = {"type": "final", "description": "the run is done"}
        self._hide(
            "run_done",
            self.done_key,
            None,
            "n8n ends a run silently when no node has anything left to do; here that "
            "is a final state",
        )

    # -- ids, keys and bookkeeping ---------------------------------------------------------------

    def _ref(self, key: str) -> str:
        return f"#{self.machine_id}.{key}"

    def _id(self, name: str) -> str:
        """The state of node ``name`` (placing it when first reached)."""
        if name not in self.placed:
            self.placed.add(name)
            self.states[self.keys[name]] = {}
            self.queue.append(name)
        return self._ref(self.keys[name])

    def _fallback(self) -> str:
        return (
            self._ref(self.next_key) if self.resumable or self.looping else self._ref(self.done_key)
        )

    def _new_key(self, base: str) -> str:
        key = unique(base, set(self.states) | self.all_keys)
        self.all_keys.add(key)
        self.states[key] = {}
        return key

    def _hide(self, kind: str, key: str, node: str | None, reason: str) -> None:
        self.hidden.append(HiddenState(kind, key, node, reason))

    def _map(self, name: str, key: str | None, how: str) -> None:
        node = self.graph.node(name)
        self.mappings[name] = NodeMapping(name, node.type, key, how)

    def _need(
        self,
        kind: str,
        name: str,
        node: str | None,
        doc: str,
        provided: bool = False,
        signature: str | None = None,
    ) -> str:
        self.impls.setdefault(
            (kind, name), Implementation(kind, name, node, doc, provided, signature)
        )
        return name

    def _event(self, base: str) -> str:
        event = unique(base, self.events)
        self.events.add(event)
        return event

    # -- n8n's scheduling, written into the transitions -------------------------------------------

    def _slots(self, name: str) -> int:
        """Input slots with wires (n8n: ``connectionsByDestinationNode[name].main.length``);
        more than one makes the node wait for each of them."""
        return max(
            (i + 1 for wires in self.graph.wires.values() for _, t, i in wires if t == name),
            default=1,
        )

    def _ordered(self, children: list[tuple[int, str, int]]) -> list[list[Any]]:
        """Wires in the order n8n adds their targets to the stack (v1): sorted bottom-up by
        canvas position with n8n's own comparator, each put on the front of the stack."""
        position = {n.name: n.position for n in self.graph.workflow.nodes}
        # legacy: the wires' own order (by output, then as wired), each added at the back
        ordered = children if self.legacy else _n8n_sort(children, lambda c: position[c[1]])
        return [
            [
                output,
                target,
                index,
                self._slots(target),
                required_inputs(self.graph.node(target)),
                input_count(self.graph.node(target), self._slots(target)),
            ]
            for output, target, index in ordered
        ]

    def _children(self, name: str) -> list[list[Any]]:
        return self._ordered(list(self.graph.wires.get(name, [])))

    def _route(self, params: dict[str, Any]) -> dict[str, Any]:
        """The route action; its static part (the node's wires in n8n's order, its outputs)
        goes once into ``context.n8n.graph`` under the route's name."""
        name = params["node"] if params["how"] != "failed" else f"{params['node']}:failed"
        self.routes[name] = params
        return {"type": ROUTE, "params": {"route": name}}

    def _leave(
        self, name: str, params: dict[str, Any], when: str | None = None
    ) -> list[dict[str, Any]]:
        """Transitions out of ``name`` taken *before* its route: one guarded transition per
        node that can run next (top-most first, as n8n runs them; the error output only
        leads on from ``<node>_failed``), each running the route, then the next waiting
        branch. ``when`` (what a trigger or a Wait waits for: "after 5 minutes") opens each
        transition's description, so the diagram's arrows say it."""
        error = params.get("error_output")
        targets = list(
            dict.fromkeys(
                child[1]
                for child in self._run_order(params["children"])
                if child[0] != error or params["how"] == "failed"
            )
        )
        route = self._route(params)
        labels = _opened(self._labels(name, params["children"]), when)
        leave: list[dict[str, Any]] = [
            {
                "guard": {
                    "type": "next_node_is",
                    "params": {
                        "node": target,
                        **({"start": params["node"][6:]} if params["how"] == "start" else {}),
                    },
                },
                "target": self._id(target),
                "actions": [route],
                "description": labels[target],
                "reenter": True,
            }  # a node wired to itself runs again (entry, invoke)
            for target in targets
        ]
        leave.append(
            {
                "target": self._fallback(),
                "actions": [route],
                "description": self._fallback_label(when if not targets else None),
            }
        )
        return leave

    def _resume(
        self, targets: list[str], labels: dict[str, str] | None = None, when: str | None = None
    ) -> list[dict[str, Any]]:
        """Transitions taken *after* a route: to whichever node is current (``when`` as in
        ``_leave``)."""
        said = _opened({t: (labels or {}).get(t, PASSED) for t in targets}, when)
        resume: list[dict[str, Any]] = [
            {
                "guard": {"type": "current_node_is", "params": {"node": target}},
                "target": self._id(target),
                "description": said[target],
                "reenter": True,
            }
            for target in dict.fromkeys(self._run_order(targets))
        ]
        resume.append(
            {
                "target": self._fallback(),
                "description": self._fallback_label(when if not targets else None),
            }
        )
        return resume

    def _run_order(self, added: list[Any]) -> list[Any]:
        """Targets in the order they run: v1 puts each on the front of the stack (the last
        added runs first), the legacy order at the back."""
        return list(added) if self.legacy else list(reversed(added))

    def _fallback_label(self, when: str | None = None) -> str:
        said = (
            "no items go on: the next waiting branch"
            if self.resumable or self.looping
            else "no items go on: the run ends"
        )
        return f"{when}: {said}" if when else said

    def _labels(self, name: str, children: list[list[Any]]) -> dict[str, str]:
        names = self._output_names(name) if self.graph.workflow.has_node(name) else ()
        found: dict[str, list[str]] = {}
        for output, target, index, slots, *_ in children:
            label = names[output] if output < len(names) else f"output {output}"
            if names[:1] == ("output 0",) and output == 0:
                label = PASSED
            if slots > 1:
                label += f" (input {index + 1})"
            found.setdefault(target, [])
            if label not in found[target]:
                found[target].append(label)
        return {target: ", ".join(labels) for target, labels in found.items()}

    def _regular(self, name: str) -> Outputs:
        node = self.graph.node(name)
        width = self.graph.output_count(name)
        error = nk.error_mode(node) == "continueErrorOutput"
        return regular_outputs(node, width - 1 if error and width >= 2 else width)

    def _output_names(self, name: str) -> tuple[str, ...]:
        error = nk.error_mode(self.graph.node(name)) == "continueErrorOutput"
        return self._regular(name).names + (("error",) if error else ())

    # -- one node --------------------------------------------------------------------------------

    def _build_node(self, name: str) -> None:
        node = self.graph.node(name)
        key = self.keys[name]
        state = self.states[key]
        state["description"] = name
        kind = self.graph.kinds[name]
        if name in self.graph.disabled:
            how = self._pass(
                name, state, "disabled: passes the items of its first input on, as n8n does"
            )
        else:
            builders: dict[Kind, Callable[[str, dict[str, Any]], str]] = {
                Kind.IF: self._if,
                Kind.WAIT: self._wait,
                Kind.FORM_PAGE: self._wait,
                Kind.LOOP: self._loop,
                Kind.EXECUTE_WORKFLOW: self._execute_workflow,
                Kind.STOP_AND_ERROR: self._stop,
                Kind.NO_OP: self._no_op,
            }
            try:
                how = builders.get(kind, self._work)(name, state)
            except N8nFormatError as exc:  # degrade: a generic state, the rest imports
                state.clear()
                state["description"] = name
                self.warnings.append(
                    f"{exc} (node '{name}' imported as a generic node, an actor stub, instead)"
                )
                how = "malformed settings: generic node; " + self._work(name, state)
        state["meta"] = {"n8n": self._meta(name)}
        summary = self._summary(name, how)
        if summary:  # the diagram shows the name as its title, this below it
            state["description"] = f"{name}\n{summary}"
        self._map(name, key, how)
        if kind is Kind.WORK and not nk.is_known_type(node):
            self.mappings[name] = NodeMapping(
                name, node.type, key, f'unknown node type: generic "doing {name}" state; {how}'
            )
        if node.execute_once and name not in self.graph.disabled:
            self.decisions.append(
                f"'{name}' has executeOnce: it gets only the first item of each input, as in n8n"
            )
        if node.always_output_data:
            self.decisions.append(
                f"'{name}' has alwaysOutputData: when its output 0 gets no "
                "items the machine sends one empty item there, as n8n does"
            )

    def _summary(self, name: str, how: str) -> str | None:
        """What a reviewer needs to see of a node in the diagram beyond its name: what a
        Wait waits for, a loop's batch size, that a Merge waits for its inputs, what Stop
        and Error says (an expression as written)."""
        kind = self.graph.kinds[name]
        node = self.graph.node(name)
        if name in self.graph.disabled:
            return "disabled: passes its items on"
        if how.startswith("malformed"):
            return None
        if kind in (Kind.WAIT, Kind.FORM_PAGE):
            return how.replace("timer: after", "waits", 1).replace(
                "waits for event", "waits for", 1
            )
        if kind is Kind.LOOP:
            spec = nk.loop_spec(node)
            size = spec.batch_expression or str(spec.batch_size)
            return f"Loop Over Items: batches of {size}" + (
                ", starts again on every visit" if spec.reset else ""
            )
        if self._slots(name) > 1:
            mode = node.parameters.get("mode")
            kind_name = "Merge" if node.type == MERGE else nk.describe_type(node)
            return f"{kind_name}: waits for its {self._slots(name)} inputs" + (
                f" ({mode})" if isinstance(mode, str) else ""
            )
        if kind is Kind.STOP_AND_ERROR:
            message = nk.stop_and_error_message(node) or "Stop and Error"
            return f"fails the run: {message}"
        if kind is Kind.IF and self._asked_loop(name) is not None:
            return f"asks: no items left in '{self._asked_loop(name)}'? (true: none left)"
        if node.execute_once:
            return "executeOnce: gets only the first item"
        return None

    def _meta(self, name: str) -> dict[str, Any]:
        node = self.graph.node(name)
        meta: dict[str, Any] = {
            "node": name,
            "type": node.type,
            "typeVersion": _number(node.type_version),
        }
        settings = {
            key: _number(value)
            for key, value in (
                ("retryOnFail", node.retry_on_fail),
                ("maxTries", node.max_tries),
                ("waitBetweenTries", node.wait_between_tries),
                ("onError", node.on_error),
                ("continueOnFail", node.continue_on_fail),
                ("alwaysOutputData", node.always_output_data),
                ("executeOnce", node.execute_once),
                ("disabled", node.disabled),
            )
            if value
        }
        if settings:
            meta["settings"] = settings
        if name in self.graph.sub_nodes:
            meta["sub_nodes"] = self.graph.sub_nodes[name]
        return meta

    def _params(self, name: str, how: str, **extra: Any) -> dict[str, Any]:
        node = self.graph.node(name)
        params: dict[str, Any] = {
            "node": name,
            "how": how,
            "outputs": len(self._output_names(name)),
            "children": self._children(name),
        }
        if node.always_output_data:
            params["always_output"] = True
        if node.execute_once and name not in self.graph.disabled:
            params["once"] = True
        if name in self.idle and how in ("pass", "loop", "no_items_left"):
            params["idle"] = True
        params.update(extra)
        return params

    def _work(self, name: str, state: dict[str, Any]) -> str:
        node = self.graph.node(name)
        key = self.keys[name]
        mode = nk.error_mode(node)
        names = self._output_names(name)
        regular = [n for n in names if n != "error"] if mode == "continueErrorOutput" else names
        slots = self._slots(name)
        once = "_once" if node.execute_once else ""
        invoke: dict[str, Any] = {
            "id": key,
            "src": key,
            "input": {"$n8n": ("inputs" if slots > 1 else "items") + once},
            "description": nk.describe_type(node),
        }
        retry = nk.retry_policy(node)
        if retry is not None:
            invoke["retry"] = retry
            self._retry_states(name, key, retry)
        how = [f"invokes actor '{key}'"]
        params = self._params(
            name,
            "actor",
            **({"error_output": len(regular)} if mode == "continueErrorOutput" else {}),
        )
        if nk.is_send_and_wait(node):
            invoke["onDone"] = {
                "target": self._ref(self._reply_wait(name, key, params)),
                "actions": [self._route(params)],
            }
            how.append("then waits for the reply")
        else:
            invoke["onDone"] = self._leave(name, params)
        if mode == "stopWorkflow":
            # n8n stops the run: the error stays unhandled, so the engine fails the run
            invoke["onFinalFailure"] = "fail_run"
        else:
            invoke["onError"] = self._on_error(name, key, mode, len(regular))
        state["invoke"] = invoke
        returns = ITEMS_TYPE if len(regular) == 1 else f"list[{ITEMS_TYPE}]"
        takes = f"inputs: list[{ITEMS_TYPE}]" if slots > 1 else f"items: {ITEMS_TYPE}"
        outputs_doc = (
            "returns the items of its output"
            if len(regular) == 1
            else "returns one list of items per output, in this order: "
            + ", ".join(f"{i}: {n}" for i, n in enumerate(regular))
        )
        self._need(
            "actor",
            key,
            name,
            f"does the work of n8n node '{name}' "
            f"({nk.describe_type(node)}): gets "
            + ("one list of items per input" if slots > 1 else "the items of its input")
            + f", {outputs_doc}",
            signature=f"{takes}|{returns}",
        )
        if len(regular) > 1:
            self.decisions.append(
                f"'{name}' routes per item: its actor returns the items of "
                f"each of its {len(regular)} outputs ({', '.join(regular)}); "
                "every output that gets items runs, as in n8n"
            )
        if retry is not None:
            how.append(
                f"retry: {retry['max_attempts']} attempts, {retry['initial_interval']} ms apart"
            )
            self.decisions.append(
                f"'{name}' retries {retry['max_attempts']} times "
                f"{retry['initial_interval']} ms apart: n8n sleeps in memory, "
                "here the wait is a durable timer"
            )
        if not self._regular(name).known:
            self.decisions.append(
                f"'{name}' ({node.type}): its outputs are not in the table "
                f"of node outputs; taken from its wires ({len(regular)})"
            )
        how.append(
            {
                "stopWorkflow": "a failure fails the run (engine status error)",
                "continueRegularOutput": "a failure continues on the regular output",
                "continueErrorOutput": "a failure continues on the error output",
            }[mode]
        )
        return "; ".join(how)

    def _on_error(self, name: str, key: str, mode: str, error_output: int) -> str:
        failed = self._new_key(f"{key}_failed")
        output = 0 if mode == "continueRegularOutput" else error_output
        setting = "continueOnFail" if self.graph.node(name).on_error is None else f"onError: {mode}"
        where = "regular output" if output == 0 else f"error output (output {output})"
        params = self._params(name, "failed", error_output=output)
        targets = [child[1] for child in params["children"] if child[0] == output]
        self.states[failed].update(
            {
                "description": f"{name} failed",
                "entry": [self._route(params)],
                "always": self._resume(targets, {t: f"continue on its {where}" for t in targets}),
            }
        )
        self.decisions.append(
            f"'{name}' continues when it fails ({setting}): its actor raising counts as every "
            "item failing, one error item per item on its "
            + (
                "error output, with the item's fields beside the error"
                if output
                else "regular output"
            )
            + "; in n8n a node failing outside its own item loop "
            "passes its input on output 0 instead"
        )
        self._hide(
            "error_outcome",
            failed,
            name,
            f"{setting}: when '{name}' fails n8n does not stop the run but sends an "
            f"error item down its {where}; this state makes that outcome explicit",
        )
        return self._ref(failed)

    def _retry_states(self, name: str, key: str, retry: dict[str, Any]) -> None:
        tries, wait = retry["max_attempts"], retry["initial_interval"]
        attempting, waiting = retry_steps(key)
        self._hide(
            "retry",
            attempting,
            name,
            f"Retry on Fail: n8n silently calls '{name}' up to {tries} times; the engine "
            "expands the invoke's retry policy into this attempting state",
        )
        self._hide(
            "retry",
            waiting,
            name,
            f"Retry on Fail: between attempts n8n sleeps {wait} ms in memory; here the "
            "wait is a durable timer state",
        )

    def _no_retry(self, name: str, what: str) -> None:
        if self.graph.node(name).retry_on_fail:
            self.warnings.append(
                f"'{name}' has Retry on Fail, but {what} has nothing that can "
                "fail here; the setting is dropped"
            )

    def _reply_wait(self, name: str, key: str, params: dict[str, Any]) -> str:
        wait = self._new_key(f"{key}_waiting_for_reply")
        event = self._event(f"{event_name(key)}_REPLIED")
        targets = [child[1] for child in params["children"]]
        state: dict[str, Any] = {
            "description": f"waiting for a reply to '{name}'",
            "on": {event: self._resume(targets, when=f"on {event}")},
        }
        timeout = nk.reply_timeout(self.graph.node(name))
        if timeout is not None:
            state["after"] = {
                self._delay(name, key, timeout, "time_limit"): self._resume(
                    targets, when=_time_limit(timeout, "a reply")
                )
            }
        self.states[wait].update(state)
        limit = f"; after {timeout.text} it goes on without one" if timeout else ""
        self._hide(
            "reply_wait",
            wait,
            name,
            f"'{name}' sends a message and n8n parks the run until the reply arrives "
            f"(event {event}){limit}",
        )
        return wait

    def _delay(self, name: str, key: str, duration: nk.Duration, suffix: str) -> str:
        if duration.ms is not None:
            if duration.ms < 65_000:
                self.decisions.append(
                    f"'{name}' waits {duration.text}: n8n keeps waits under "
                    "65 s in memory (a restart loses them); here it is a "
                    "durable timer"
                )
            return str(duration.ms)
        return self._need(
            "delay",
            f"{key}_{suffix}",
            name,
            f"milliseconds to wait for '{name}': n8n computes {duration.text!r} at run time",
        )

    def _pass(self, name: str, state: dict[str, Any], how: str) -> str:
        self._eventless(name, state, self._params(name, "pass"))
        return how

    def _eventless(self, name: str, state: dict[str, Any], params: dict[str, Any]) -> None:
        """A node that does no work: its route is the state's entry and the state is left at
        once for the node that runs next (or for ``loops_forever``, see ``_idle_loops``)."""
        state["entry"] = [self._route(params)]
        always = self._resume(
            [c[1] for c in params["children"]], self._labels(name, params["children"])
        )
        if params.get("idle"):
            always.insert(
                0,
                {
                    "guard": {"type": "loops_forever"},
                    "target": self._ref(self.forever_key or self.done_key),
                    "description": "the items go round for ever",
                },
            )
        state["always"] = always

    def _asked_loop(self, name: str) -> str | None:
        """The Loop Over Items node an If asks "no items left?", if that is all it asks."""
        loop = nk.no_items_left_loop(self.graph.node(name))
        if (
            loop is None
            or not self.graph.workflow.has_node(loop)
            or self.graph.kinds[loop] is not Kind.LOOP
        ):
            return None
        return loop

    def _if(self, name: str, state: dict[str, Any]) -> str:
        loop = self._asked_loop(name)
        if loop is None:
            return "choice per item: " + self._work(name, state)
        self._no_retry(name, "an If asking a loop whether it is done")
        self._eventless(name, state, self._params(name, "no_items_left", loop=loop))
        return f"choice: \"no items left in '{loop}'?\" reads the loop's memory"

    def _wait(self, name: str, state: dict[str, Any]) -> str:
        node = self.graph.node(name)
        self._no_retry(name, "a wait")
        spec = (
            nk.form_page_spec(node)
            if self.graph.kinds[name] is Kind.FORM_PAGE
            else nk.wait_spec(node)
        )
        key = self.keys[name]
        params = self._params(name, "pass", resumed=True)
        if spec.delay is not None:
            suffix = "delay" if spec.mode == "timeInterval" else "until"
            state["after"] = {
                self._delay(name, key, spec.delay, suffix): self._leave(
                    name, params, _after(spec.delay)
                )
            }
            return f"timer: after {spec.delay.text}"
        what = "WEBHOOK_CALLED" if spec.mode == "webhook" else "FORM_SUBMITTED"
        event = self._event(f"{event_name(key)}_{what}")
        state["on"] = {event: self._leave(name, params, f"on {event}")}
        how = f"waits for event {event}"
        if spec.timeout is not None:
            state["after"] = {
                self._delay(name, key, spec.timeout, "time_limit"): self._leave(
                    name, params, _time_limit(spec.timeout, "the " + what.split("_")[0].lower())
                )
            }
            how += f"; time limit {spec.timeout.text}, then goes on"
        self.decisions.append(
            f"'{name}' resumes on {event}: the items it passes on are the "
            "ones it received (n8n passes the webhook's or form's data)"
        )
        return how

    def _loop(self, name: str, state: dict[str, Any]) -> str:
        spec = nk.loop_spec(self.graph.node(name))
        self._no_retry(name, "Loop Over Items")
        if spec.batch_expression is not None:
            self.warnings.append(
                f"'{name}': the batch size is an n8n expression "
                f"({spec.batch_expression}); the import uses "
                f"{spec.batch_size}"
            )
        if spec.reset_expression is not None:
            self.decisions.append(
                f"'{name}': its option reset is an n8n expression "
                f"({spec.reset_expression}); the machine cannot evaluate "
                "it and never resets the loop: decide whether it should "
                "start again from the items that come in"
            )
        extra = {"reset": True} if spec.reset else {}
        self._eventless(
            name,
            state,
            self._params(
                name,
                "loop",
                batch_size=spec.batch_size,
                loop_output=spec.loop_output,
                done_output=spec.done_output,
                **extra,
            ),
        )
        if self._inside_loop(name):
            self.decisions.append(
                f"'{name}' runs inside another loop: as in n8n, once it is done it never "
                "starts again, so every later round of the outer loop skips its body and "
                "gets all items it ever processed on done (n8n issue #23670); the machine "
                "does what production does, set its option reset to start it afresh"
            )
        done = (
            f"output {spec.done_output} (done)"
            if spec.done_output is not None
            else "nothing (v1: one output; it returns no data and the branch ends)"
        )
        return (
            f"loop: batches of {spec.batch_size} on output {spec.loop_output} (loop), "
            f"the processed items on {done} once no batch is left"
            + (
                "; starts again on every visit (reset)"
                if spec.reset
                else "; never starts again once done"
            )
            + "; its memory is context.n8n.loops"
        )

    def _inside_loop(self, name: str) -> bool:
        """True when Loop Over Items ``name`` sits in the body of another one: the other's
        loop output leads to it, and its own done output leads back to the other."""
        own = nk.loop_spec(self.graph.node(name))
        if own.done_output is None:
            return False
        for other in self.graph.kinds:
            if other == name or self.graph.kinds[other] is not Kind.LOOP:
                continue
            try:
                spec = nk.loop_spec(self.graph.node(other))
            except N8nFormatError:
                continue
            body = _reached(
                [t for o, t, _ in self.graph.wires.get(other, []) if o == spec.loop_output],
                self.graph.wires,
                avoid=other,
            )
            after = _reached(
                [t for o, t, _ in self.graph.wires.get(name, []) if o == own.done_output],
                self.graph.wires,
                avoid=name,
            )
            if name in body and other in after:
                return True
        return False

    def _execute_workflow(self, name: str, state: dict[str, Any]) -> str:
        spec = nk.sub_workflow_spec(self.graph.node(name))
        workflow = spec.workflow or "(unset)"
        if spec.mode == "each":
            self.decisions.append(
                f"'{name}' runs sub-workflow {workflow} once per item in "
                "n8n; here its actor gets all items in one call"
            )
        if spec.waits:
            how = self._work(name, state)
            state["invoke"]["description"] = f"run sub-workflow {workflow}"
            self.decisions.append(
                f"'{name}' waits for sub-workflow {workflow}: register that "
                "workflow's imported machine (or a function) as actor "
                f"'{self.keys[name]}'; in memory it runs as a child actor, "
                "on the durable runtime as a child run (its own run, key "
                f"'<run key>/{self.keys[name]}', cancelled with this state)"
            )
            return f"invoked child: waits for sub-workflow {workflow}; {how}"
        action = self._need(
            "action",
            f"start_{self.keys[name]}",
            name,
            f"starts sub-workflow {workflow} for '{name}' without waiting "
            "(fire and forget): on the durable runtime a detached run, "
            "persistence.children.detached_start(runtime, <its machine id>)",
        )
        params = self._params(name, "pass")
        state["entry"] = [
            {"type": action, "params": {"workflow_id": spec.workflow, "mode": spec.mode}},
            self._route(params),
        ]
        state["always"] = self._resume([c[1] for c in params["children"]])
        return (
            f"fire and forget: action '{action}' starts sub-workflow {workflow} and the "
            "run goes on at once with the same items"
        )

    def _stop(self, name: str, state: dict[str, Any]) -> str:
        # A final state would end the run as *done*; n8n ends it as failed (and starts the error
        # workflow), so the state invokes an actor that raises and leaves the error unhandled.
        key = self.keys[name]
        message = nk.stop_and_error_message(self.graph.node(name))
        src = self._fail_actor()
        state.update(
            {
                "tags": ["failed"],
                "invoke": {
                    "id": key,
                    "src": src,
                    "input": {"message": message},
                    "description": "fail the run with its message",
                    "onFinalFailure": "fail_run",
                },
            }
        )
        return f"failed end: the run fails with {message!r} (engine status error)"

    def _fail_actor(self) -> str:
        return self._need(
            "actor",
            "n8n_stop_and_error",
            None,
            "raises the Stop and Error node's message",
            provided=True,
        )

    def _no_op(self, name: str, state: dict[str, Any]) -> str:
        self._no_retry(name, "No Operation")
        return self._pass(name, state, "passes its items straight on")


PASSED = "its items"  # the label of a node's only output: its items go on


def _opened(labels: dict[str, str], when: str | None) -> dict[str, str]:
    """Wire labels opened by what the node waited for (``when``): "after 5 minutes" alone
    for a node's only output, "on X: true" for a named one."""
    if not when:
        return labels
    return {
        target: when if label == PASSED else f"{when}: {label}" for target, label in labels.items()
    }


def _after(delay: nk.Duration) -> str:
    """A Wait's timer as its arrow says it: "after 5 minutes", "at {{ $json.due }}"."""
    return (
        f"at {delay.text[len('until ') :]}"
        if delay.text.startswith("until ")
        else f"after {delay.text}"
    )


def _time_limit(limit: nk.Duration, what: str) -> str:
    """A wait's time limit as its arrow says it: "after 1 hour without the webhook"."""
    return f"{_after(limit)} without {what} (time limit)"


def _reached(
    starts: list[str], wires: dict[str, list[tuple[int, str, int]]], avoid: str | None = None
) -> set[str]:
    """The nodes a path of wires leads to from ``starts`` (these included), not through
    ``avoid``."""
    seen: set[str] = set()
    pending = list(starts)
    while pending:
        name = pending.pop()
        if name not in seen and name != avoid:
            seen.add(name)
            pending.extend(target for _, target, _ in wires.get(name, []))
    return seen


def _returns_to(start: str, wires: dict[str, list[tuple[int, str, int]]], within: set[str]) -> bool:
    """True when a path of wires through nodes of ``within`` leads from ``start`` back to it."""
    following = {
        name: [(o, t, i) for o, t, i in wires.get(name, []) if t in within] for name in within
    }
    return start in _reached([t for _, t, _ in following.get(start, [])], following)


def _n8n_sort(items: list[Any], position: Callable[[Any], tuple[float, float]]) -> list[Any]:
    """n8n's ``nodesToAdd.sort`` (bottom-most first, then right-most) exactly as V8's
    TimSort runs it on short arrays: the first run (reversed when descending), then binary
    insertion. n8n's comparator is not symmetric, so the algorithm decides ties."""

    def compare(a: Any, b: Any) -> int:
        (ax, ay), (bx, by) = position(a), position(b)
        if ay < by:
            return 1
        if ay > by:
            return -1
        return -1 if ax > bx else 0

    work = list(items)
    if len(work) < 2:
        return work
    run = 2
    descending = compare(work[1], work[0]) < 0
    while run < len(work):
        order = compare(work[run], work[run - 1])
        if (order >= 0) if descending else (order < 0):
            break
        run += 1
    if descending:
        work[:run] = work[:run][::-1]
    for start in range(run, len(work)):
        pivot, low, high = work[start], 0, start
        while low < high:
            mid = low + ((high - low) >> 1)
            if compare(pivot, work[mid]) < 0:
                high = mid
            else:
                low = mid + 1
        work[low + 1 : start + 1] = work[low:start]
        work[low] = pivot
    return work


def _number(value: Any) -> Any:
    """Whole floats as ints (the export's ``3`` reads back as ``3``, not ``3.0``)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _in_document_order(
    hidden: list[HiddenState], config: dict[str, Any]
) -> tuple[HiddenState, ...]:
    """The hidden states in the order their states appear in the config."""
    order: dict[str, int] = {}
    for key, child in config["states"].items():
        order[key] = len(order)
        invoke = child.get("invoke")
        if isinstance(invoke, dict) and invoke.get("retry") is not None:
            for step in retry_steps(key):
                order[step] = len(order)
    return tuple(sorted(hidden, key=lambda h: order[h.state]))
