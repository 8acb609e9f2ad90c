"""n8n's execution stack, kept in the machine's context so an imported machine runs its nodes
in the order n8n does and hands each node the items n8n would.

Written from n8n's ``WorkflowExecute`` (packages/core/src/execution-engine/
workflow-execute.ts: ``processRunExecutionData``, ``addNodeToBeExecuted``, ``runNode``,
``prepareConnectionInputData``, ``handleExecuteOnce``, ``handleNodeErrorOutput``) for both of
its execution orders (``settings.executionOrder``: ``v1``, or absent: the legacy order):

- one node runs at a time, taken off the front of a stack. When it returns data, each wire
  of an output with items adds its target: v1 sorts the targets top-left first and puts each
  on the *front* (depth first); the legacy order keeps the wires' order and puts each at the
  *back* (breadth first), and also adds a target whose second (or later) input gets an empty
  output;
- a node with several wired inputs (Merge) waits in ``waiting`` until each input has data;
  the legacy order, when a Merge first gets data, runs the parents of its other inputs that
  no branch will reach (with one empty item);
- once a node that returned data leaves the stack empty, the first waiting node runs with
  ``[]`` for its missing inputs, unless any of its upstream nodes still waits or (v1) its
  ``requiredInputs`` have not arrived. A node that returned nothing (a finished v1 Loop Over
  Items) releases nothing;
- a node whose input is empty does not run (v1: all its inputs; legacy: its first one);
- ``executeOnce`` hands a node only the first item of each input; a failing node that
  continues sends one error item per input item (on the error output with the input item's
  fields beside ``error``, as ``handleNodeErrorOutput`` pairs them).

The imported machine has one state per node. The transition that leaves a node runs
``route`` (an ``assign``): it turns what the node returned into its outputs, schedules the
targets as above and pops the next entry into ``current``; the guards ``goes_to`` (before the
route) and ``resumes`` (after it) pick the state of the node that runs next. A node's actor
gets ``current``'s items (see ``node_input``).

Items are n8n's: ``[{"json": {...}}, ...]`` per input and per output. An actor returns the
items of its one output (a list), or, for a node with several outputs, one list per output.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from statecharts.frozen import thaw

KEY = "n8n"
EMPTY_ITEM: dict[str, Any] = {"json": {}}
Items = list[dict[str, Any]]
MAX_RUNS = 10_000  # node runs after one event before the run is taken for a runaway
MAX_ITEMS = 100_000  # items those runs handed on: a loop doubling its items is one too
_STATIC = ("graph", "flow")  # what a new run keeps of the context


# -- reading and writing the stack in context ---------------------------------------------------


def _state(context: Any) -> dict[str, Any]:
    found = context.get(KEY) if isinstance(context, Mapping) else None
    state = thaw(found) if isinstance(found, Mapping) else {}
    for key, empty in (
        ("stack", []),
        ("waiting", []),
        ("current", None),
        ("loops", {}),
        ("runs", {}),
        ("flow", {}),
    ):
        state.setdefault(key, empty)
    return state


def _legacy(state: Mapping[str, Any]) -> bool:
    return bool(state["flow"].get("order") == "legacy")


def current(context: Any) -> tuple[str, list[Items]] | None:
    """The node running now and its inputs (one item list per input), or None."""
    entry = _state(context)["current"]
    return (entry[0], entry[1]) if entry else None


def node_input(kind: str) -> Callable[[Any, Any], Any]:
    """The invoke ``input`` of a node's actor: the items of its first input (``"items"``) or
    one list per input (``"inputs"``, for Merge and other multi-input nodes); ``"items_once"``
    and ``"inputs_once"`` for a node with ``executeOnce`` (only the first item of each)."""
    once = kind.endswith("_once")

    def read(context: Any, event: Any) -> Any:
        inputs = _given(_state(context), once)
        if kind.startswith("inputs"):
            return inputs
        return inputs[0] if inputs else []

    read.__name__ = f"n8n_{kind}"
    return read


def _given(state: Mapping[str, Any], once: bool) -> list[Items]:
    """The inputs the current node gets (``once``: ``executeOnce``)."""
    entry = state["current"]
    inputs = [list(items) for items in entry[1]] if entry else []
    if once:  # handleExecuteOnce: input.slice(0, 1)
        inputs = [items[:1] for items in inputs]
    return inputs


# -- a node's outputs ---------------------------------------------------------------------------


def as_items(value: Any) -> Items:
    """One output's items from what an actor returned: a list of items (a bare dict is one
    item; an item without ``json`` is wrapped as its ``json``); None is no items."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, list | tuple):
        return [{"json": {"value": value}}]
    items = []
    for item in value:
        if isinstance(item, Mapping) and isinstance(item.get("json"), Mapping):
            items.append(dict(item))
        elif isinstance(item, Mapping):
            items.append({"json": dict(item)})
        else:
            items.append({"json": {"value": item}})
    return items


def outputs_of(value: Any, count: int) -> list[Items]:
    """``count`` outputs from an actor's return value: one list of items for a one-output
    node, one list per output otherwise (missing outputs have no items)."""
    if count <= 1:
        return [as_items(value)]
    lists = list(value) if isinstance(value, list | tuple) else []
    if lists and not all(item is None or isinstance(item, list | tuple) for item in lists):
        lists = [lists]  # items for output 0 only
    outputs = [as_items(v) for v in lists[:count]]
    return outputs + [[] for _ in range(count - len(outputs))]


def error_message(event: Any) -> str:
    """The message of a failed node's error event."""
    error = event.get("error") if isinstance(event, Mapping) else None
    return str(error.get("message") if isinstance(error, Mapping) else error or "failed")


def error_items(items: Items, message: str, keep_fields: bool) -> Items:
    """The items a node that continues on failure sends on: one per input item (n8n nodes
    catch per item under ``continueOnFail()``), ``{"error": message}``; on the error output
    with the input item's fields beside it (``handleNodeErrorOutput``:
    ``{...pairedItem.json, ...item.json}``)."""
    return [
        {"json": {**(dict(item.get("json") or {}) if keep_fields else {}), "error": message}}
        for item in items or [EMPTY_ITEM]
    ]


def _outputs(state: dict[str, Any], event: Any, params: Mapping[str, Any]) -> list[Items] | None:
    """What the node that just ran produced, by its ``how`` (see ``route``); None: it
    returned no data at all (its branch ends and no waiting node is released)."""
    how = params.get("how", "actor")
    count = int(params.get("outputs", 1))
    inputs = _given(state, bool(params.get("once")))
    if how == "failed":
        outputs: list[Items] = [[] for _ in range(count)]
        output = int(params.get("error_output", 0))
        outputs[output] = error_items(
            inputs[0] if inputs else [], error_message(event), keep_fields=output > 0
        )
        return outputs
    if how == "loop":
        return _loop_outputs(state, params)
    if how == "pass":  # handleDisabledNode, Wait, No Operation: the first input, as it is
        return [inputs[0] if inputs else []]
    if how == "start":
        items = event.get("items", event.get("input")) if isinstance(event, Mapping) else None
        return [as_items(thaw(items)) if items is not None else [dict(EMPTY_ITEM)]]
    result = event.get("output") if isinstance(event, Mapping) else None
    outputs = outputs_of(thaw(result), count - (1 if params.get("error_output") else 0))
    if params.get("error_output") is not None:
        outputs.append([])
    return outputs


def _always_output(outputs: list[Items], params: Mapping[str, Any]) -> list[Items]:
    """n8n's ``alwaysOutputData``: when a node that ran (not one that failed) has nothing on
    output 0, output 0 gets one empty item, whatever its other outputs hold."""
    if (
        params.get("always_output")
        and params.get("how") not in ("failed", "start")
        and outputs
        and not outputs[0]
    ):
        outputs = [[dict(EMPTY_ITEM)], *outputs[1:]]
    return outputs


# -- the graph n8n walks (connectionsByDestinationNode, getParentNodes) -------------------------


def _sources(state: Mapping[str, Any], node: str) -> list[list[Any]]:
    """``[source, output, input]`` for every main wire into ``node``, in n8n's order."""
    return list(state["flow"].get("sources", {}).get(node, []))


def _parents(state: Mapping[str, Any], node: str, checked: tuple[str, ...] = ()) -> list[str]:
    """n8n's ``getParentNodes`` (common/get-connected-nodes.ts ``getConnectedNodes``): every
    node upstream of ``node``, nearest last, in n8n's order."""
    if node in checked:
        return []
    checked = (*checked, node)
    found: list[str] = []
    for source, _, _ in sorted(_sources(state, node), key=lambda wire: wire[2]):
        if source in checked:
            continue
        found.insert(0, source)
        above = _parents(state, source, checked)
        for name in reversed(above):
            if name in found:
                found.remove(name)
            found.insert(0, name)
    return found


def _upstream(state: Mapping[str, Any], node: str) -> set[str]:
    """The nodes upstream of ``node`` (the set ``getParentNodes`` returns)."""
    seen: set[str] = set()
    pending = [node]
    while pending:
        for source, _, _ in _sources(state, pending.pop()):
            if source not in seen and source != node:
                seen.add(source)
                pending.append(source)
    return seen


def _downstream(state: Mapping[str, Any], node: str) -> set[str]:
    """The nodes downstream of ``node`` (``getChildNodes``)."""
    targets: dict[str, list[str]] = {}
    for target, wires in state["flow"].get("sources", {}).items():
        for source, _, _ in wires:
            targets.setdefault(source, []).append(target)
    seen: set[str] = set()
    pending = [node]
    while pending:
        for target in targets.get(pending.pop(), []):
            if target not in seen and target != node:
                seen.add(target)
                pending.append(target)
    return seen


def _js_order(names: list[str]) -> list[str]:
    """``Object.keys`` order: array-index names ascending first, then insertion order."""

    def index(name: str) -> int | None:
        return (
            int(name)
            if name.isdigit() and str(int(name)) == name and int(name) < 2**32 - 1
            else None
        )

    numeric = sorted((n for n in names if index(n) is not None), key=lambda n: index(n) or 0)
    return numeric + [n for n in names if index(n) is None]


# -- scheduling (addNodeToBeExecuted) -----------------------------------------------------------


def _enqueue(state: dict[str, Any], entry: list[Any]) -> None:
    if _legacy(state):
        state["stack"].append(entry)
    else:
        state["stack"].insert(0, entry)


def _schedule(
    state: dict[str, Any], parent: str, outputs: list[Items], children: Any, run: int
) -> None:
    """Add the targets of ``parent``'s outputs; ``children`` are ``[output, target, input,
    slots, required, declared]`` already in the order n8n adds them (``slots``: the target's
    wired inputs, ``declared``: the inputs its type has)."""
    for output, target, index, slots, required, declared in children:
        if output >= len(outputs):
            continue
        items = outputs[output]
        if not items and not (index > 0 and _legacy(state)):
            continue  # an output with no items stops its branch
        if slots <= 1:
            _enqueue(state, [target, [items], [parent]])
        else:
            _arrive(state, parent, target, index, slots, required, declared, items, run)


def _arrive(
    state: dict[str, Any],
    parent: str,
    target: str,
    index: int,
    slots: int,
    required: Any,
    declared: int,
    items: Items,
    run: int,
) -> None:
    """``items`` from ``parent`` reach input ``index`` of ``target``, a node with ``slots``
    wired inputs: they fill the first round still missing that input (or a new one); a
    complete round goes on the stack."""
    waiting = state["waiting"]
    entry = next((w for w in waiting if w[0] == target), None)
    was_waiting = entry is not None
    if entry is None:
        entry = [target, {}, declared, required]
        waiting.append(entry)
    rounds: dict[str, Any] = entry[1]
    key = next((k for k in sorted(rounds, key=int) if rounds[k][index] is None), None)
    if key is None:  # n8n numbers a new round by the count of rounds (and may overwrite one)
        key = str(len(rounds))
        rounds[key] = [None] * slots
    rounds[key][index] = [items, parent]
    if all(arrived is not None for arrived in rounds[key]):
        slot = rounds.pop(key)
        if not rounds:
            waiting.remove(entry)
        _enqueue(state, [target, [a[0] for a in slot], [a[1] for a in slot]])
        return
    if not was_waiting and _legacy(state):
        _force_parents(state, parent, target, run, items)


def _force_parents(state: dict[str, Any], parent: str, target: str, run: int, items: Items) -> None:
    """The legacy order, when ``target`` first waits: a parent of its other inputs that no
    branch will reach runs (with one empty item), or the nearest of its own parents that did
    not run (``addNodeToBeExecuted``, ``isLegacyExecutionOrder``)."""
    siblings = {
        child
        for child, wires in state["flow"].get("sources", {}).items()
        if any(wire[0] == parent for wire in wires)
    }
    for source, _, _ in sorted(_sources(state, target), key=lambda wire: wire[2]):
        on_stack = [entry[0] for entry in state["stack"]]
        if source == parent:
            continue
        if source in siblings and not _incoming_empty(state, source, run):
            continue
        if source in on_stack or source in state["runs"]:
            continue
        add: str | None = source
        for name in [source, *reversed(_parents(state, source))]:
            if (name != source and name in siblings) or name in on_stack:
                add = None
                break
            if name in state["runs"]:
                break
            add = name
        if add is None or (parent in _upstream(state, add) and not items):
            continue
        if not _sources(state, add) or _incoming_empty(state, add, run):
            _enqueue(state, [add, [[dict(EMPTY_ITEM)]], [parent]])


def _incoming_empty(state: Mapping[str, Any], node: str, run: int) -> bool:
    """``incomingConnectionIsEmpty`` for ``node``'s first input at run ``run``."""
    for source, output, index in _sources(state, node):
        runs = state["runs"].get(source, [])
        if index == 0 and run < len(runs) and output < len(runs[run]) and runs[run][output] == "1":
            return False
    return True


def _release_waiting(state: dict[str, Any]) -> None:
    """The stack ran dry after a node that returned data: the first waiting node none of
    whose upstream nodes still waits (and, v1, whose ``requiredInputs`` arrived) runs, the
    missing inputs as ``[]``; a round with no items at all is dropped."""
    names = _js_order([w[0] for w in state["waiting"]])
    scan = 0
    while scan < len(names):
        entry = next(w for w in state["waiting"] if w[0] == names[scan])
        target, rounds, declared, required = entry
        required = None if _legacy(state) else required
        if required == "all" or (_upstream(state, target) & set(names)):
            scan += 1
            continue
        key = sorted(rounds)[0]  # runIndexes.sort(): as strings
        slot = rounds[key]
        arrived = [i for i, got in enumerate(slot) if got is not None]
        if required is not None and not _satisfied(required, arrived):
            scan += 1
            continue
        data = [got[0] if got is not None else [] for got in slot]
        data += [[] for _ in range(declared - len(data))]
        sources = [got[1] if got is not None else None for got in slot]
        sources += [None] * (declared - len(sources))
        del rounds[key]
        if not rounds:
            state["waiting"].remove(entry)
        if any(data):
            state["stack"].append([target, data, sources])
            return
        names, scan = _js_order([w[0] for w in state["waiting"]]), 0


def _satisfied(required: Any, arrived: list[int]) -> bool:
    if isinstance(required, list | tuple):
        return all(i in arrived for i in required)
    return len(arrived) >= int(required)


def _runs_without_input(state: Mapping[str, Any], entry: list[Any]) -> bool:
    """``prepareConnectionInputData``: False when n8n skips the node for want of items (v1:
    every input empty; legacy: its first input empty, unless it never arrived and another
    came back round a loop, whose items it then takes)."""
    inputs = entry[1]
    if not _legacy(state):
        return any(inputs)
    if inputs and inputs[0]:
        return True
    sources = entry[2] if len(entry) > 2 else []
    if sources and sources[0] is None:
        below = _downstream(state, entry[0])
        for i, items in enumerate(inputs):
            source = sources[i] if i < len(sources) else None
            if items and source is not None and (source == entry[0] or source in below):
                return True  # the node still gets its inputs as they are
    return False


def _next(state: dict[str, Any], release: bool) -> dict[str, Any]:
    """Take the next node off the stack into ``current``; ``release``: the node that ran
    returned data, so an empty stack releases a waiting node first. A node n8n skips for
    want of items is dropped without releasing anything."""
    if release and not state["stack"] and state["waiting"]:
        _release_waiting(state)
    state["current"] = None
    while state["stack"]:
        entry = state["stack"].pop(0)
        trigger = state["graph"].get(f"start:{entry[0]}") or {}
        if trigger.get("trigger") == entry[0]:
            # the legacy order ran a trigger's branch (see _force_parents): it passes its
            # items on (executeTriggerNode outside a manual run), with no state of its own
            _run_here(state, entry[0], [list(entry[1][0]) if entry[1] else []], trigger)
            continue
        disabled = entry[0] in state["flow"].get("disabled", ())
        if disabled or _runs_without_input(state, entry):
            state["current"] = entry
            break
        params = state["graph"].get(entry[0]) or {}
        if params.get("always_output"):
            # runNode returns no data for want of items, alwaysOutputData makes it one item
            _run_here(state, entry[0], [[dict(EMPTY_ITEM)]], params)
    return state


def _run_here(
    state: dict[str, Any], node: str, outputs: list[Items], params: Mapping[str, Any]
) -> None:
    """A node that returns ``outputs`` without its state running: recorded, its targets
    scheduled and, the stack run dry, a waiting node released."""
    done = state["runs"].setdefault(node, [])
    done.append("".join("1" if got else "0" for got in outputs))
    state["last"] = outputs[0]
    _schedule(state, node, outputs, params.get("children", ()), len(done) - 1)
    if not state["stack"] and state["waiting"]:
        _release_waiting(state)


def _advance(context: Any, event: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    state = _state(context)
    if params.get("how") == "start":
        state = _state({KEY: {key: state[key] for key in _STATIC if key in state}})
    outputs = _outputs(state, event, params)
    if outputs is None and params.get("always_output"):
        outputs = [[dict(EMPTY_ITEM)]]  # ensureAlwaysOutputData turns null into one item
    if outputs is None:  # nodeSuccessData null: `continue executionLoop`
        return _next(state, release=False)
    outputs = _always_output(outputs, params)
    node = params.get("trigger") if params.get("how") == "start" else params.get("node")
    run = 0
    if node:
        done = state["runs"].setdefault(node, [])
        done.append("".join("1" if items else "0" for items in outputs))
        run = len(done) - 1
    if params.get("how") != "start":
        state["last"] = outputs[0] if outputs else []
    _schedule(state, str(node or ""), outputs, params.get("children", ()), run)
    return _next(state, release=True)


def route(context: Any, event: Any, route: str) -> dict[str, Any]:
    """The context update after a node ran: its outputs scheduled, the next entry current.

    ``route`` names the node's static part in ``context.n8n.graph`` (written by the import):
    ``node``, ``children`` (its wires, see ``_schedule``), ``outputs`` (how many), and
    ``how``, which says where the outputs come from: ``actor`` (the done event's output),
    ``failed`` (error items on ``error_output``), ``pass`` (the node's first input, as Wait
    and No Operation do), ``start`` (a trigger: the event's ``items``, else one empty item),
    ``loop`` (Loop Over Items, see ``_loop_outputs``), ``no_items_left`` (an If asking a loop
    whether it is done)."""
    params = _state(context)["graph"][route]
    if params["how"] == "no_items_left":
        state = _no_items_left(context, params)
    else:
        state = _advance(context, event, params)
    _count_work(state, params)
    _watch_idle(state, params)
    return {KEY: state}


# -- runaways: work without anything new coming in ----------------------------------------------


def _count_work(state: dict[str, Any], params: Mapping[str, Any]) -> None:
    """Count the nodes run since the run last took something in (its trigger, a Wait's
    timer or webhook); past ``flow.max_runs`` the run is a runaway: n8n would go on calling
    nodes without end, so ``forever`` names the nodes going round and the run fails."""
    if params.get("how") == "start" or params.get("resumed"):
        state["work"] = {"runs": 0, "items": 0, "nodes": {}}
        return
    work = state.setdefault("work", {"runs": 0, "items": 0, "nodes": {}})
    work["runs"] += 1
    current = state["current"]
    work["items"] = work.get("items", 0) + sum(len(got) for got in (current or [0, []])[1])
    node = str(params.get("node"))
    work["nodes"][node] = work["nodes"].get(node, 0) + 1
    runs = int(state["flow"].get("max_runs", MAX_RUNS))
    items = int(state["flow"].get("max_items", MAX_ITEMS))
    if (work["runs"] > runs or work["items"] > items) and not state.get("forever"):
        busiest = sorted(work["nodes"].items(), key=lambda kv: -kv[1])
        names = (
            ", ".join(f"'{name}' ({count}x)" for name, count in busiest[:8] if count > 1)
            or f"'{node}'"
        )
        state["forever"] = (
            f"runaway: {work['runs']} node runs handing on {work['items']} "
            f"items since the run last took anything in (bounds: {runs} "
            f"runs, {items} items), going round {names}; n8n would not "
            "stop"
        )
        state["current"] = None


def _watch_idle(state: dict[str, Any], params: Mapping[str, Any]) -> None:
    """Notice when n8n would pass items round a loop of nodes that do no work for ever.

    Routes marked ``idle`` (No Operation, disabled nodes, Loop Over Items, "no items left?",
    a Wait for a time interval: nothing outside the stack decides what they do) follow each
    other as eventless transitions or a Wait's timer; any other route ends the streak.
    During a streak the stack state after a route is compared with one saved earlier
    (Brent's cycle finding: saved again after 1, 2, 4, ... routes). The run is endless when
    the same node is current with the same loop memory and waiting Merges, and the stack has
    not shrunk and starts with the entries the routes in between took off it (the rest was
    never touched): from here n8n repeats what it just did, for ever. ``forever`` is set;
    the import's ``loops_forever`` state fails the run (n8n would keep going until the
    execution is cancelled).

    The waiting Merges may also have grown (see ``_waiting_grew``): the loop feeds a Merge an
    input it already has, each round, while the other never comes. n8n keeps every such
    round waiting, so it runs for ever with its memory growing; the machine's context would
    grow with it, each route slower than the last, so the run fails here too."""
    if not params.get("idle"):
        state.pop("idle", None)
        return
    now = [state["current"], state["stack"], state["waiting"], state["loops"]]
    watch = state.get("idle")
    if watch is None:
        state["idle"] = {"saved": now, "low": len(state["stack"]), "power": 1, "steps": 0}
        return
    current, stack, waiting, loops = watch["saved"]
    low = min(watch["low"], len(state["stack"]))
    taken = len(stack) - low  # entries of the saved stack some route took off it
    if (
        state["current"] == current
        and state["loops"] == loops
        and len(state["stack"]) >= len(stack)
        and state["stack"][:taken] == stack[:taken]
        and (state["waiting"] == waiting or (low > 0 and _waiting_grew(waiting, state["waiting"])))
    ):
        state["forever"] = state.get("forever") or True
    steps = watch["steps"] + 1
    if steps == watch["power"]:
        watch = {"saved": now, "low": len(state["stack"]), "power": 2 * watch["power"], "steps": 0}
    else:
        watch = {**watch, "low": low, "steps": steps}
    state["idle"] = watch


def _waiting_grew(saved: list[Any], now: list[Any]) -> bool:
    """True when the routes since ``saved`` only added rounds to waiting Merges, and will do
    so again: each Merge still waits for the rounds it waited for, in order, and all its
    rounds lack the same inputs, so the inputs that arrived in between (the ones the new
    rounds have) will again each start a round of their own. The stack never ran dry in
    between (the caller checks), so no waiting node was released."""
    before = {entry[0]: entry[1] for entry in saved}
    for target, rounds, *_ in now:
        old = before.pop(target, None)
        if old is None or any(key not in rounds or rounds[key] != old[key] for key in old):
            return False  # a Merge that started waiting (or whose rounds changed)
        new = [rounds[key] for key in rounds if key not in old]
        if new and len({_missing(slot) for slot in [*old.values(), *new]}) != 1:
            return False
    return not before


def _missing(slot: list[Any]) -> tuple[int, ...]:
    return tuple(i for i, got in enumerate(slot) if got is None)


def loops_forever(context: Any, event: Any) -> bool:
    """True when the run has been found going round for ever (see ``_watch_idle`` and
    ``_count_work``)."""
    return bool(_state(context).get("forever"))


def forever_message(default: str) -> Callable[[Any, Any], dict[str, str]]:
    """The input of the ``loops_forever`` state's actor: the runaway's message, else
    ``default`` (the loop of idle nodes the import found)."""

    def read(context: Any, event: Any) -> dict[str, str]:
        found = _state(context).get("forever")
        return {"message": found if isinstance(found, str) else default}

    read.__name__ = "n8n_forever"
    return read


def goes_to(context: Any, event: Any, node: str, start: str | None = None) -> bool:
    """True when ``node`` runs next once the node running now (or, ``start`` given, the
    trigger ``start``) has been routed: the guard of a transition whose action is that
    route."""
    if start is not None:
        name = f"start:{start}"
    else:
        entry = current(context)
        name = entry[0] if entry else ""
    entry = route(context, event, name)[KEY]["current"]
    return bool(entry) and entry[0] == node


def resumes(context: Any, event: Any, node: str) -> bool:
    """True when ``node`` is the one to run now (after a ``route``)."""
    entry = current(context)
    return entry is not None and entry[0] == node


def last_items(context: Any, event: Any) -> Items:
    """The machine's output: the items the last node that ran sent on its first output (what
    an n8n sub-workflow hands back to the Execute Workflow node that called it)."""
    return list(_state(context).get("last") or [])


# -- Loop Over Items (splitInBatches) and "no items left?" --------------------------------------


def _loop_outputs(state: dict[str, Any], params: Mapping[str, Any]) -> list[Items] | None:
    """n8n's SplitInBatches V1/V2/V3 ``execute``: the first visit (or every visit, with the
    option ``reset``) stores the items and hands out the first batch; each later visit adds
    the items that came back to the processed ones and hands out the next batch. Once done
    it never starts again (a loop inside a loop skips every later round of the outer one:
    n8n issue #23670): the done output (V2/V3) gets all processed items each visit; V1 has
    no done output and returns nothing, which ends the branch."""
    node = params["node"]
    size = int(params.get("batch_size", 1))
    loop_output, done_output = params.get("loop_output", 0), params.get("done_output")
    given = _given(state, bool(params.get("once")))
    items = given[0] if given else []
    memory = state["loops"].get(node)
    if memory is None or params.get("reset"):
        batch, rest = items[:size], items[size:]
        memory = {"items": rest, "processed": []}
    else:
        batch, rest = memory["items"][:size], memory["items"][size:]
        processed = memory["processed"] + items if done_output is not None else []
        memory = {"items": rest, "processed": processed}
    memory["no_items_left"] = not memory["items"]
    state["loops"][node] = memory
    if not batch and done_output is None:
        return None
    outputs: list[Items] = [[] for _ in range(2 if done_output is not None else 1)]
    if batch:
        outputs[loop_output] = batch
    elif done_output is not None:
        outputs[done_output] = memory["processed"]
    return outputs


def _no_items_left(context: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    state = _state(context)
    given = _given(state, bool(params.get("once")))
    items = given[0] if given else []
    memory = state["loops"].get(params["loop"]) or {}
    outputs = _always_output([items, []] if memory.get("no_items_left") else [[], items], params)
    done = state["runs"].setdefault(params["node"], [])
    done.append("".join("1" if got else "0" for got in outputs))
    state["last"] = outputs[0]
    _schedule(state, params["node"], outputs, params.get("children", ()), len(done) - 1)
    return _next(state, release=True)


INPUT_MARK = "$n8n"


def with_inputs(config: Any) -> Any:
    """``config`` with every invoke ``input`` written ``{"$n8n": "items"}`` (or ``"inputs"``,
    ``"items_once"``, ``"inputs_once"``) replaced by the function reading the current node's
    items, the machine ``output`` ``{"$n8n": "output"}`` by ``last_items`` and
    ``{"$n8n": "forever", "message": ...}`` by ``forever_message``: a JSON config cannot hold
    the functions, so loading the machine puts them in."""
    if isinstance(config, Mapping):
        mark = config.get(INPUT_MARK)
        if len(config) == 1 and mark in ("items", "inputs", "items_once", "inputs_once"):
            return node_input(mark)
        if len(config) == 1 and mark == "output":
            return last_items
        if len(config) == 2 and mark == "forever":
            return forever_message(str(config.get("message")))
        return {key: with_inputs(value) for key, value in config.items()}
    if isinstance(config, list):
        return [with_inputs(value) for value in config]
    return config
