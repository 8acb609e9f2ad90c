"""From the executable graph to a statechart config (XState v5 authoring shape).

Every node that does something becomes one state; what n8n does silently around it becomes
extra, *hidden* states, each recorded with the node it came from and why:

- the machine waits for one of its triggers (``waiting_for_trigger``, one event per trigger);
- a node that fails stops the run (``failed``), unless its ``onError`` continues, in which case
  an explicit ``<node>_failed`` state routes the error to the regular or the error output;
- Retry on Fail is an invoke with a ``retry`` policy that the engine expands into attempting /
  waiting-to-retry states;
- one output wired to several nodes runs all of them: a parallel state, one region per branch,
  and a Merge (or any node the branches share) is the join after the regions finish;
- a node with nothing attached to an output ends that branch (``branch_done``, ``done``).

Targets are written as ``#<machine>.<path>`` ids, so a state can live in any region.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from . import node_kinds as nk
from .graph import Graph
from .mapping import HiddenState, Implementation, MachineImport, NodeMapping
from .naming import event_name, snake, unique
from .node_kinds import Kind
from .runtime import RESERVED

MERGE = nk.BASE + "merge"


class _Scope:
    """A compound state being filled: the root, or one region of a parallel (fork) state."""

    def __init__(self, path: tuple[str, ...], parent: _Scope | None, stops: set[str]) -> None:
        self.path = path
        self.parent = parent
        self.states: dict[str, dict[str, Any]] = {}
        self.stops = stops
        self.arrivals: dict[str, _Ref] = {}
        self.end: _Ref | None = None


@dataclass(frozen=True)
class _Ref:
    scope: _Scope
    key: str


@dataclass(frozen=True)
class Entry:
    """How a run of the machine starts: an ``event`` (None: at once) leading to ``heads``;
    ``nodes`` are the trigger nodes this entry stands for (mapped to no state), ``origin`` names
    the fork when the entry starts several branches."""

    event: str | None
    heads: tuple[str, ...]
    nodes: tuple[str, ...]
    origin: str
    why: str


class MachineBuilder:
    """Builds one machine from ``graph``; ``node_keys`` gives every node its state key."""

    def __init__(self, graph: Graph, machine_id: str, node_keys: dict[str, str],
                 events: set[str]) -> None:
        self.graph = graph
        self.machine_id = machine_id
        self.keys = node_keys
        self.all_keys = set(node_keys.values())
        self.root = _Scope((), None, set())
        self.placed: dict[str, _Ref] = {}
        self.queue: deque[str] = deque()
        self.hidden: list[HiddenState] = []
        self.mappings: dict[str, NodeMapping] = {}
        self.impls: dict[tuple[str, str], Implementation] = {}
        self.loops: dict[str, dict[str, Any]] = {}
        self.warnings: list[str] = []
        self.events = set(events)  # trigger events already taken
        self.order = {n.name: n.index for n in graph.workflow.nodes}

    # -- the machine -----------------------------------------------------------------------------

    def build(self, entries: list[Entry], wait_for_trigger: bool,
              meta: dict[str, Any]) -> MachineImport:
        """The machine whose runs start as ``entries`` say."""
        if wait_for_trigger and entries:
            initial = self._trigger_wait(entries)
        elif entries:
            heads = tuple(h for e in entries for h in e.heads)
            initial = self._route(list(dict.fromkeys(heads)), self.root, entries[0].origin).key
            for entry in entries:
                for name in entry.nodes:
                    self._map(name, None, entry.why)
        else:
            initial = self._branch_end(self.root).key
            self.warnings.append("nothing starts this workflow (no enabled trigger and no node "
                                 "without an incoming connection)")
        while self.queue:
            self._build_node(self.queue.popleft())
        if self.root.end is not None:  # the run's final state reads best last
            self.root.states[self.root.end.key] = self.root.states.pop(self.root.end.key)
        config: dict[str, Any] = {"id": self.machine_id, "initial": initial}
        if self.loops:
            config["context"] = {"loops": self.loops}
        config["states"] = self.root.states
        config["meta"] = meta
        return MachineImport(self.machine_id, config, _in_document_order(self.hidden, config),
                             tuple(self.mappings[n] for n in sorted(self.mappings,
                                                                    key=self.order.__getitem__)),
                             tuple(self.impls.values()), tuple(self.warnings))

    def _trigger_wait(self, entries: list[Entry]) -> str:
        key = self._new_key(self.root, "waiting_for_trigger")
        on: dict[str, str] = {}
        for entry in entries:
            assert entry.event is not None
            on[entry.event] = self._id(self._route(list(entry.heads), self.root, entry.origin))
            for name in entry.nodes:
                self._map(name, None, entry.why)
        self.root.states[key].update({
            "description": "waiting for a trigger",
            "on": on,
        })
        triggers = ", ".join(sorted(on))
        self._hide("trigger_wait", self.root, key, None,
                   f"an n8n workflow sits idle until a trigger fires; each of its {len(on)} "
                   f"entry point(s) is an event here: {triggers}")
        return key

    # -- ids, keys and bookkeeping ---------------------------------------------------------------

    def _id(self, ref: _Ref) -> str:
        return "#" + ".".join((self.machine_id, *ref.scope.path, ref.key))

    def _path(self, ref: _Ref) -> str:
        return ".".join((*ref.scope.path, ref.key))

    def _new_key(self, scope: _Scope, base: str) -> str:
        key = unique(base, set(scope.states) | self.all_keys)
        scope.states[key] = {}
        return key

    def _hide(self, kind: str, scope: _Scope, key: str, node: str | None, reason: str) -> None:
        self.hidden.append(HiddenState(kind, ".".join((*scope.path, key)), node, reason))

    def _map(self, name: str, ref: _Ref | None, how: str) -> None:
        node = self.graph.node(name)
        self.mappings[name] = NodeMapping(name, node.type, self._path(ref) if ref else None, how)

    def _need(self, kind: str, name: str, node: str | None, doc: str,
              provided: bool = False) -> str:
        self.impls.setdefault((kind, name), Implementation(kind, name, node, doc, provided))
        return name

    def _guard_name(self, base: str, pending: Iterable[str] = ()) -> str:
        """A name for a node's own guard, clashing with no other guard: registered, provided,
        or ``pending`` (chosen but not registered yet)."""
        taken = {name for kind, name in self.impls if kind == "guard"} | RESERVED
        return unique(base, taken | set(pending))

    def _event(self, base: str) -> str:
        event = unique(base, self.events)
        self.events.add(event)
        return event

    # -- where a wire leads ----------------------------------------------------------------------

    def _route(self, targets: list[str], scope: _Scope, origin: str) -> _Ref:
        """The state items go to next: the target's state, a fork over several targets, or the
        end of the branch when nothing is attached."""
        if not targets:
            return self._branch_end(scope)
        if len(targets) == 1:
            return self._ref(targets[0], scope)
        return self._fork(targets, scope, origin)

    def _ref(self, name: str, scope: _Scope) -> _Ref:
        here: _Scope | None = scope
        while here is not None:
            if name in here.stops:
                return self._arrival(here, name)
            here = here.parent
        if name in self.placed:
            return self.placed[name]
        key = self.keys[name]
        scope.states[key] = {}
        ref = _Ref(scope, key)
        self.placed[name] = ref
        self.queue.append(name)
        return ref

    def _branch_end(self, scope: _Scope) -> _Ref:
        if scope.end is not None:
            return scope.end
        if scope.parent is None:
            key = self._new_key(scope, "done")
            scope.states[key].update({"type": "final", "description": "the run is done"})
            self._hide("run_done", scope, key, None,
                       "n8n ends a run silently when no node has anything left to do; here "
                       "that is a final state every finished branch leads to")
        else:
            key = self._new_key(scope, "branch_done")
            scope.states[key].update({"type": "final", "description": "this branch is done"})
            self._hide("branch_done", scope, key, None,
                       "this parallel branch has nothing attached after its last node; the "
                       "region ends here and waits for its sibling branches")
        scope.end = _Ref(scope, key)
        return scope.end

    def _arrival(self, scope: _Scope, name: str) -> _Ref:
        if name not in scope.arrivals:
            key = self._new_key(scope, f"at_{self.keys[name]}")
            scope.states[key].update({
                "type": "final", "description": f"reached '{name}'; waiting for the other branches",
            })
            what = "Merge" if self.graph.node(name).type == MERGE else "node"
            self._hide("join", scope, key, name,
                       f"n8n holds the items that reached {what} '{name}' until its other "
                       "inputs arrive; this branch waits here and the join runs once every "
                       "branch has finished")
            scope.arrivals[name] = _Ref(scope, key)
        return scope.arrivals[name]

    # -- forks and joins -------------------------------------------------------------------------

    def _fork(self, heads: list[str], scope: _Scope, origin: str) -> _Ref:
        stops, join = self._regions(heads, scope)
        origin_key = self.keys.get(origin, snake(origin))
        key = self._new_key(scope, f"{origin_key}_fork")
        fork_ref = _Ref(scope, key)
        origin_node = origin if self.graph.workflow.has_node(origin) else None
        self._hide("fork", scope, key, origin_node,
                   f"one output of '{origin}' is wired to {len(heads)} nodes; n8n runs every "
                   "branch (one after the other in v1 order), here they are parallel regions")
        regions: dict[str, Any] = {}
        for i, head in enumerate(heads, 1):
            region_key = f"branch_{i}"
            region = _Scope((*scope.path, key, region_key), scope, stops[i - 1])
            head_ref = self._ref(head, region)
            if head_ref.scope is not region:
                head_ref = self._hand_over(region, head, head_ref, origin)
            start = "straight to" if head_ref.key.startswith("at_") and \
                head_ref.scope.arrivals.get(head) == head_ref else "from"
            regions[region_key] = {"description": f"branch {i}: {start} '{head}'",
                                   "initial": head_ref.key, "states": region.states}
            self.hidden.append(HiddenState(
                "fork", ".".join(region.path), origin_node,
                f"branch {i} of {len(heads)} from '{origin}', starting at '{head}'"))
        done = self._ref(join, scope) if join is not None else self._branch_end(scope)
        scope.states[key].update({
            "type": "parallel",
            "description": f"all branches after '{origin}'",
            "states": regions,
            "onDone": self._id(done),
        })
        return fork_ref

    def _hand_over(self, region: _Scope, head: str, target: _Ref, origin: str) -> _Ref:
        key = self._new_key(region, f"to_{self.keys[head]}")
        region.states[key].update({"description": f"continue at '{head}'",
                                   "always": self._id(target)})
        self.warnings.append(f"a branch from '{origin}' leads straight back to '{head}', "
                             "which the statechart already reached elsewhere; that branch "
                             "jumps there and leaves its sibling branches")
        return _Ref(region, key)

    def _regions(self, heads: list[str], scope: _Scope) -> tuple[list[set[str]], str | None]:
        """Where each branch stops (a Merge joining it with others, or a node several branches
        share) and which of those is the join the fork continues at."""
        barriers = set(self.placed)
        here: _Scope | None = scope
        while here is not None:
            barriers |= here.stops
            here = here.parent
        barriers |= self._joining_merges(heads, barriers)
        reaches = [self._reach(h, barriers) for h in heads]
        seen = Counter(n for expanded, _ in reaches for n in expanded)
        common = {n for n, count in seen.items() if count > 1}
        if common:
            reaches = [self._reach(h, barriers | common) for h in heads]
        stops = [hits - set(self.placed) for _, hits in reaches]
        counts = Counter(n for hits in stops for n in hits)
        if not counts:
            return stops, None
        join = max(counts, key=lambda n: (counts[n], -self.order[n]))
        for name in counts:
            if name != join and self.graph.node(name).type != MERGE:
                self.warnings.append(f"'{name}' is reached from parallel branches but they "
                                     f"join at '{join}'; '{name}' runs only if reached again "
                                     "after the join")
        if self.graph.node(join).type != MERGE and counts[join] > 1:
            self.warnings.append(f"'{join}' is reached from {counts[join]} parallel branches; "
                                 "n8n runs it once per arriving branch, the statechart runs "
                                 "it once after all branches (a join)")
        return stops, join

    def _joining_merges(self, heads: list[str], barriers: set[str]) -> set[str]:
        """The Merge nodes the branches must stop at: those reached by several branches or fed
        from outside the branch. A Merge whose inputs all come from inside one branch is that
        branch's own business (a fork and join nested in it)."""
        expanded = [self._reach(h, barriers)[0] for h in heads]
        joining = set()
        for name in set().union(*expanded):
            if self.graph.node(name).type != MERGE:
                continue
            inside = [region for region in expanded if name in region]
            if len(inside) > 1 or any(p not in inside[0] for p in self.graph.predecessors(name)):
                joining.add(name)
        return joining

    def _reach(self, head: str, barriers: set[str]) -> tuple[set[str], set[str]]:
        expanded: set[str] = set()
        hits: set[str] = set()
        pending = [head]
        while pending:
            name = pending.pop()
            if name in barriers:
                hits.add(name)
            elif name not in expanded:
                expanded.add(name)
                pending.extend(self.graph.successors(name))
        return expanded, hits

    # -- one node --------------------------------------------------------------------------------

    def _build_node(self, name: str) -> None:
        ref = self.placed[name]
        node = self.graph.node(name)
        state = ref.scope.states[ref.key]
        state["description"] = name
        builders: dict[Kind, Callable[[str, _Ref, dict[str, Any]], str]] = {
            Kind.IF: self._if, Kind.SWITCH: self._switch, Kind.FILTER: self._filter,
            Kind.WAIT: self._wait, Kind.FORM_PAGE: self._wait, Kind.LOOP: self._loop,
            Kind.EXECUTE_WORKFLOW: self._execute_workflow, Kind.STOP_AND_ERROR: self._stop,
            Kind.NO_OP: self._no_op,
        }
        kind = self.graph.kinds[name]
        how = builders.get(kind, self._work)(name, ref, state)
        state["meta"] = {"n8n": self._meta(name)}
        self._map(name, ref, how)
        if kind is Kind.WORK and not nk.is_known_type(node):
            self.mappings[name] = NodeMapping(
                name, node.type, self._path(ref),
                f"unknown node type: generic \"doing {name}\" state; {how}")

    def _meta(self, name: str) -> dict[str, Any]:
        node = self.graph.node(name)
        meta: dict[str, Any] = {"node": name, "type": node.type,
                                "typeVersion": _number(node.type_version)}
        settings = {key: _number(value) for key, value in (
            ("retryOnFail", node.retry_on_fail), ("maxTries", node.max_tries),
            ("waitBetweenTries", node.wait_between_tries), ("onError", node.on_error),
            ("continueOnFail", node.continue_on_fail),
            ("alwaysOutputData", node.always_output_data),
            ("executeOnce", node.execute_once)) if value}
        if settings:
            meta["settings"] = settings
        if name in self.graph.sub_nodes:
            meta["sub_nodes"] = self.graph.sub_nodes[name]
        return meta

    def _next(self, name: str, output: int, ref: _Ref) -> str:
        return self._id(self._route(self.graph.targets(name, output), ref.scope, name))

    def _work(self, name: str, ref: _Ref, state: dict[str, Any],
              extra_input: dict[str, Any] | None = None) -> str:
        node = self.graph.node(name)
        key = ref.key
        mode = nk.error_mode(node)
        regular = self._regular_outputs(name, mode)
        invoke: dict[str, Any] = {"id": key, "src": key}
        if extra_input is not None:
            invoke["input"] = extra_input
        retry = nk.retry_policy(node)
        if retry is not None:
            invoke["retry"] = retry
            self._retry_states(name, ref, retry)
        how = [f"invokes actor '{key}'"]
        if nk.is_send_and_wait(node):
            invoke["onDone"] = self._id(self._reply_wait(name, ref))
            how.append("then waits for the reply")
        elif len(regular) == 1:
            invoke["onDone"] = self._next(name, 0, ref)
        else:
            invoke["onDone"] = [
                {"guard": self._need("guard", guard, name,
                                     f"true when '{name}' sends its items to output "
                                     f"{i} ({label})"),
                 "target": self._next(name, i, ref), "description": label}
                for i, (label, guard) in enumerate(regular[:-1])
            ] + [{"target": self._next(name, len(regular) - 1, ref),
                  "description": regular[-1][0]}]
            how.append(f"routes to {len(regular)} outputs by guards")
        if mode == "stopWorkflow":
            # n8n stops the run: the error stays unhandled, so the engine fails the run
            invoke["onFinalFailure"] = "fail_run"
        else:
            invoke["onError"] = self._on_error(name, ref, mode, len(regular))
        state["invoke"] = invoke
        self._need("actor", key, name, f"does the work of n8n node '{name}' "
                   f"({nk.describe_type(node)})")
        if retry is not None:
            how.append(f"retry: {retry['max_attempts']} attempts, {retry['initial_interval']} ms "
                       "apart")
        how.append({"stopWorkflow": "a failure fails the run (engine status error)",
                    "continueRegularOutput": "a failure continues on the regular output",
                    "continueErrorOutput": "a failure continues on the error output"}[mode])
        return "; ".join(how)

    def _regular_outputs(self, name: str, mode: str) -> list[tuple[str, str]]:
        node = self.graph.node(name)
        key = self.keys[name]
        categories = nk.classifier_categories(node)
        if categories:
            labels = categories
        else:
            width = self.graph.output_count(name)
            count = width - 1 if mode == "continueErrorOutput" and width >= 2 else width
            labels = [f"output {i}" for i in range(max(1, count))]
        result: list[tuple[str, str]] = []
        for label in labels:
            guard = self._guard_name(f"{key}_{snake(label, 'output')}", (g for _, g in result))
            result.append((label, guard))
        return result

    def _on_error(self, name: str, ref: _Ref, mode: str, error_output: int) -> str:
        key = self._new_key(ref.scope, f"{ref.key}_failed")
        output = 0 if mode == "continueRegularOutput" else error_output
        setting = "continueOnFail" if self.graph.node(name).on_error is None else \
            f"onError: {mode}"
        where = "regular output" if output == 0 else f"error output (output {output})"
        target = self._next(name, output, ref)
        ref.scope.states[key].update({
            "description": f"{name} failed",
            "always": {"target": target, "description": f"continue on its {where}"},
        })
        self._hide("error_outcome", ref.scope, key, name,
                   f"{setting}: when '{name}' fails n8n does not stop the run but sends an "
                   f"error item down its {where}; this state makes that outcome explicit")
        return self._id(_Ref(ref.scope, key))

    def _retry_states(self, name: str, ref: _Ref, retry: dict[str, Any]) -> None:
        tries, wait = retry["max_attempts"], retry["initial_interval"]
        self._hide("retry", ref.scope, f"{ref.key}.attempting", name,
                   f"Retry on Fail: n8n silently calls '{name}' up to {tries} times; the engine "
                   "expands the invoke's retry policy into this attempting state")
        self._hide("retry", ref.scope, f"{ref.key}.waiting_to_retry", name,
                   f"Retry on Fail: between attempts n8n sleeps {wait} ms in memory; here the "
                   "wait is a durable timer state")

    def _reply_wait(self, name: str, ref: _Ref) -> _Ref:
        key = self._new_key(ref.scope, f"{ref.key}_waiting_for_reply")
        event = self._event(f"{event_name(ref.key)}_REPLIED")
        target = self._next(name, 0, ref)
        state: dict[str, Any] = {"description": f"waiting for a reply to '{name}'",
                                 "on": {event: target}}
        timeout = nk.reply_timeout(self.graph.node(name))
        if timeout is not None:
            state["after"] = {self._delay(name, ref.key, timeout, "time_limit"): target}
        ref.scope.states[key].update(state)
        limit = f"; after {timeout.text} it goes on without one" if timeout else ""
        self._hide("reply_wait", ref.scope, key, name,
                   f"'{name}' sends a message and n8n parks the run until the reply arrives "
                   f"(event {event}){limit}")
        return _Ref(ref.scope, key)

    def _delay(self, name: str, key: str, duration: nk.Duration, suffix: str) -> str:
        if duration.ms is not None:
            return str(duration.ms)
        return self._need("delay", f"{key}_{suffix}", name,
                          f"milliseconds to wait for '{name}': n8n computes "
                          f"{duration.text!r} at run time")

    def _if(self, name: str, ref: _Ref, state: dict[str, Any]) -> str:
        loop = nk.no_items_left_loop(self.graph.node(name))
        guard: Any
        if loop is not None and self.graph.workflow.has_node(loop) and \
                self.graph.kinds[loop] is Kind.LOOP:
            guard = {"type": self._need("guard", "no_items_left", None,
                                        "true when the batch a Loop Over Items just handed "
                                        "out was its last", provided=True),
                     "params": {"loop": self.keys[loop]}}
            how = f"choice: \"no items left in '{loop}'?\" reads the loop's batch pointer"
        else:
            guard = self._need("guard", self._guard_name(ref.key), name,
                               f"true when the items pass the conditions of If '{name}'")
            how = f"choice: guard '{guard}' true -> output 0, else output 1"
        state["always"] = [
            {"guard": guard, "target": self._next(name, 0, ref), "description": "true"},
            {"target": self._next(name, 1, ref), "description": "false"},
        ]
        return how

    def _switch(self, name: str, ref: _Ref, state: dict[str, Any]) -> str:
        node = self.graph.node(name)
        spec = nk.switch_spec(node)
        options = node.parameters.get("options")
        if isinstance(options, dict) and options.get("allMatchingOutputs") is True:
            self.warnings.append(f"'{name}' sends items to every matching output; the "
                                 "statechart takes the first matching rule only")
        branches = list(spec.branches)
        last: tuple[str, int] | None = None
        if spec.by_expression and branches:
            last = branches.pop()
        always = []
        for label, output in branches:
            guard = self._guard_name(f"{ref.key}_{snake(label, 'rule')}")
            always.append({"guard": self._need("guard", guard, name,
                                               f"true when Switch '{name}' routes to "
                                               f"'{label}' (output {output})"),
                           "target": self._next(name, output, ref),
                           "description": label})
        if last is not None:
            always.append({"target": self._next(name, last[1], ref),
                           "description": last[0]})
            fallback = "the last output when no other matches"
        elif spec.fallback is not None:
            always.append({"target": self._next(name, spec.fallback, ref),
                           "description": "fallback"})
            fallback = f"fallback output {spec.fallback}"
        else:
            always.append({"target": self._id(self._branch_end(ref.scope)),
                           "description": "no rule matched: items dropped"})
            fallback = "no fallback: unmatched items are dropped"
        state["always"] = always
        return f"choice over {len(spec.branches)} outputs by guards; {fallback}"

    def _filter(self, name: str, ref: _Ref, state: dict[str, Any]) -> str:
        guard = self._need("guard", self._guard_name(ref.key), name,
                           f"true when the items pass the conditions of Filter '{name}'")
        kept = self.graph.output_count(name) > 1
        state["always"] = [
            {"guard": guard, "target": self._next(name, 0, ref), "description": "kept"},
            {"target": self._next(name, 1, ref) if kept else
             self._id(self._branch_end(ref.scope)),
             "description": "discarded" if kept else "dropped"},
        ]
        return f"guard '{guard}'; " + ("discarded items go to output 1" if kept else
                                         "items that fail are dropped (the branch ends)")

    def _wait(self, name: str, ref: _Ref, state: dict[str, Any]) -> str:
        node = self.graph.node(name)
        spec = nk.form_page_spec(node) if self.graph.kinds[name] is Kind.FORM_PAGE else \
            nk.wait_spec(node)
        target = self._next(name, 0, ref)
        if spec.delay is not None:
            suffix = "delay" if spec.mode == "timeInterval" else "until"
            state["after"] = {self._delay(name, ref.key, spec.delay, suffix): target}
            return f"timer: after {spec.delay.text}"
        what = "WEBHOOK_CALLED" if spec.mode == "webhook" else "FORM_SUBMITTED"
        event = self._event(f"{event_name(ref.key)}_{what}")
        state["on"] = {event: target}
        how = f"waits for event {event}"
        if spec.timeout is not None:
            state["after"] = {self._delay(name, ref.key, spec.timeout, "time_limit"): target}
            how += f"; time limit {spec.timeout.text}, then goes on"
        return how

    def _loop(self, name: str, ref: _Ref, state: dict[str, Any]) -> str:
        spec = nk.loop_spec(self.graph.node(name))
        key = ref.key
        self.loops[key] = {"batch_size": spec.batch_size, "next": 0, "total": None}
        if spec.batch_expression is not None:
            self.warnings.append(f"'{name}': the batch size is an n8n expression "
                                 f"({spec.batch_expression}); the import uses "
                                 f"{spec.batch_size}")
        params = {"loop": key, "batch_size": spec.batch_size}
        state["entry"] = [{"type": self._need("action", "take_next_batch", None,
                                              "moves a Loop Over Items to its next batch",
                                              provided=True), "params": params}]
        exhausted = {"type": self._need("guard", "batches_exhausted", None,
                                        "true when a Loop Over Items has no batch left",
                                        provided=True), "params": {"loop": key}}
        reset = {"type": self._need("action", "reset_batches", None,
                                    "forgets a finished Loop Over Items' items", provided=True),
                 "params": {"loop": key}}
        done = self._next(name, spec.done_output, ref) if spec.done_output is not None else \
            self._id(self._branch_end(ref.scope))
        state["always"] = [
            {"guard": exhausted, "target": done, "actions": [reset],
             "description": "done"},
            {"target": self._next(name, spec.loop_output, ref), "description": "loop"},
        ]
        return (f"loop: batch pointer in context.loops.{key} (batches of {spec.batch_size}); "
                "guarded transition to " + ("the done output" if spec.done_output is not None
                                            else "the end of the branch (v1/v2: no done output)")
                + " when the batches are exhausted")

    def _execute_workflow(self, name: str, ref: _Ref, state: dict[str, Any]) -> str:
        spec = nk.sub_workflow_spec(self.graph.node(name))
        call = {"workflow_id": spec.workflow, "mode": spec.mode}
        if spec.waits:
            how = self._work(name, ref, state, extra_input=call)
            state["invoke"]["description"] = f"run sub-workflow {spec.workflow or '(unset)'}"
            return f"invoked child: waits for sub-workflow {spec.workflow or '(unset)'}; {how}"
        action = self._need("action", f"start_{ref.key}", name,
                            f"starts sub-workflow {spec.workflow or '(unset)'} for '{name}' "
                            "without waiting (fire and forget)")
        state["entry"] = [{"type": action, "params": call}]
        state["always"] = self._next(name, 0, ref)
        return (f"fire and forget: action '{action}' starts sub-workflow "
                f"{spec.workflow or '(unset)'} and the run goes on at once")

    def _stop(self, name: str, ref: _Ref, state: dict[str, Any]) -> str:
        # A final state would end the run as *done*; n8n ends it as failed (and starts the error
        # workflow), so the state invokes an actor that raises and leaves the error unhandled.
        message = nk.stop_and_error_message(self.graph.node(name))
        src = self._need("actor", "n8n_stop_and_error", None,
                         "raises the Stop and Error node's message", provided=True)
        state.update({"tags": ["failed"],
                      "invoke": {"id": ref.key, "src": src, "input": {"message": message},
                                 "description": f"fail the run: {message or 'Stop and Error'}",
                                 "onFinalFailure": "fail_run"}})
        return f"failed end: the run fails with {message!r} (engine status error)"

    def _no_op(self, name: str, ref: _Ref, state: dict[str, Any]) -> str:
        state["always"] = self._next(name, 0, ref)
        return "passes straight on"


def _number(value: Any) -> Any:
    """Whole floats as ints (the export's ``3`` reads back as ``3``, not ``3.0``)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _in_document_order(hidden: list[HiddenState],
                       config: dict[str, Any]) -> tuple[HiddenState, ...]:
    """The hidden states in the order their states appear in the config."""
    order: dict[str, int] = {}

    def walk(states: dict[str, Any], prefix: str) -> None:
        for key, child in states.items():
            path = f"{prefix}{key}"
            order[path] = len(order)
            invoke = child.get("invoke")
            if isinstance(invoke, dict) and invoke.get("retry") is not None:
                order[f"{path}.attempting"] = len(order)
                order[f"{path}.waiting_to_retry"] = len(order)
            walk(child.get("states") or {}, f"{path}.")

    walk(config["states"], "")
    return tuple(sorted(hidden, key=lambda h: order[h.state]))
