"""n8n's execution stack, kept in the machine's context so an imported machine runs its nodes
in the order n8n does and hands each node the items n8n would.

n8n (``WorkflowExecute``, execution order v1) runs one node at a time from a stack. When a
node finishes, every output that produced items feeds the nodes wired to it: the targets are
sorted top-left first by canvas position and put on the front of the stack, so the top-most
branch runs to its end before the next one starts (depth first). A node with several inputs
(Merge) waits in ``waiting`` until each input has items; when the stack runs dry, a waiting
node whose required inputs arrived runs with ``[]`` for the others (Merge v2+: any one input;
``chooseBranch``: inputs 0 and 1). An output with no items stops its branch.

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


# -- reading and writing the stack in context ---------------------------------------------------

def _state(context: Any) -> dict[str, Any]:
    found = context.get(KEY) if isinstance(context, Mapping) else None
    state = thaw(found) if isinstance(found, Mapping) else {}
    state.setdefault("stack", [])
    state.setdefault("waiting", [])
    state.setdefault("current", None)
    state.setdefault("loops", {})
    return state


def current(context: Any) -> tuple[str, list[Items]] | None:
    """The node running now and its inputs (one item list per input), or None."""
    entry = _state(context)["current"]
    return (entry[0], entry[1]) if entry else None


def node_input(kind: str) -> Callable[[Any, Any], Any]:
    """The invoke ``input`` of a node's actor: the items of its first input (``"items"``) or
    one list per input (``"inputs"``, for Merge and other multi-input nodes)."""

    def read(context: Any, event: Any) -> Any:
        entry = current(context)
        inputs = entry[1] if entry else []
        if kind == "inputs":
            return inputs
        return inputs[0] if inputs else []

    read.__name__ = f"n8n_{kind}"
    return read


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


def error_items(event: Any) -> Items:
    """The item n8n sends down an error (or the regular) output when a node fails."""
    error = event.get("error") if isinstance(event, Mapping) else None
    message = str(error.get("message") if isinstance(error, Mapping) else error or "failed")
    return [{"json": {"error": message}}]


def _outputs(context: Any, event: Any, params: Mapping[str, Any]) -> list[Items]:
    """What the node that just ran produced, by its ``how`` (see ``route``)."""
    how = params.get("how", "actor")
    count = int(params.get("outputs", 1))
    entry = current(context)
    inputs = entry[1] if entry else []
    if how == "failed":
        outputs: list[Items] = [[] for _ in range(count)]
        outputs[int(params.get("error_output", 0))] = error_items(event)
        return outputs
    if how == "pass":
        outputs = [list(inputs[0]) if inputs else []] + [[] for _ in range(count - 1)]
    elif how == "start":
        items = event.get("items", event.get("input")) if isinstance(event, Mapping) else None
        outputs = [as_items(thaw(items)) if items is not None else [dict(EMPTY_ITEM)]]
    else:
        output = event.get("output") if isinstance(event, Mapping) else None
        outputs = outputs_of(thaw(output), count - (1 if params.get("error_output") else 0))
        if params.get("error_output") is not None:
            outputs.append([])
    return outputs


def _always_output(outputs: list[Items], params: Mapping[str, Any]) -> list[Items]:
    """n8n's ``alwaysOutputData``: when a node that ran (not one that failed) has nothing on
    output 0, output 0 gets one empty item, whatever its other outputs hold."""
    if params.get("always_output") and params.get("how") not in ("failed", "start") \
            and outputs and not outputs[0]:
        outputs = [[dict(EMPTY_ITEM)], *outputs[1:]]
    return outputs


# -- scheduling (n8n's addNodeToBeExecuted and the waiting-node release) ------------------------

def _schedule(state: dict[str, Any], outputs: list[Items], children: Any) -> None:
    """Put the targets of each output that produced items on the stack; ``children`` are
    ``[output, target, input, slots, required, declared]`` already in n8n's order of adding
    (``slots``: the target's wired inputs, ``declared``: the inputs its type has)."""
    for output, target, index, inputs, required, declared in children:
        items = outputs[output] if output < len(outputs) else []
        if not items:
            continue  # an output with no items stops its branch
        if inputs <= 1:
            state["stack"].insert(0, [target, [items]])
            continue
        _arrive(state, target, index, inputs, required, declared, items)


def _arrive(state: dict[str, Any], target: str, index: int, inputs: int, required: Any,
            declared: int, items: Items) -> None:
    waiting = state["waiting"]
    entries = next((w for w in waiting if w[0] == target), None)
    if entries is None:
        entries = [target, [], declared, required]
        waiting.append(entries)
    slot = next((e for e in entries[1] if e[index] is None), None)
    if slot is None:
        slot = [None] * inputs
        entries[1].append(slot)
    slot[index] = items
    if all(s is not None for s in slot):
        entries[1].remove(slot)
        if not entries[1]:
            waiting.remove(entries)
        state["stack"].insert(0, [target, slot])


def _release_waiting(state: dict[str, Any]) -> None:
    """The stack ran dry: the first waiting node whose required inputs have items runs, the
    missing inputs as ``[]`` (an entry with no items at all is dropped)."""
    scan = 0
    while scan < len(state["waiting"]):
        target, slots, declared, required = state["waiting"][scan]
        slot = slots[0]
        arrived = [i for i, items in enumerate(slot) if items is not None]
        if required is not None and not _satisfied(required, arrived):
            scan += 1
            continue
        data = [items if items is not None else [] for items in slot]
        data += [[] for _ in range(declared - len(data))]
        slots.pop(0)
        if not slots:
            state["waiting"].pop(scan)
        if any(data):
            state["stack"].append([target, data])
            return
        scan = 0


def _satisfied(required: Any, arrived: list[int]) -> bool:
    if isinstance(required, list | tuple):
        return all(i in arrived for i in required)
    return len(arrived) >= int(required)


def _advance(context: Any, event: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    state = _state(context)
    if params.get("how") == "start":
        state = _state({KEY: {"graph": state.get("graph", {})}})
    outputs = _always_output(_loop_outputs(state, params) if params.get("how") == "loop"
                             else _outputs(context, event, params), params)
    if params.get("how") != "start":
        state["last"] = outputs[0] if outputs else []
    _schedule(state, outputs, params.get("children", ()))
    return _pop(state)


def _pop(state: dict[str, Any]) -> dict[str, Any]:
    if not state["stack"]:
        _release_waiting(state)
    state["current"] = state["stack"].pop(0) if state["stack"] else None
    return state


def route(context: Any, event: Any, route: str) -> dict[str, Any]:
    """The context update after a node ran: its outputs scheduled, the next entry current.

    ``route`` names the node's static part in ``context.n8n.graph`` (written by the import):
    ``node``, ``children`` (its wires, see ``_schedule``), ``outputs`` (how many), and
    ``how``, which says where the outputs come from: ``actor`` (the done event's output),
    ``failed`` (an error item on ``error_output``), ``pass`` (the node's first input, as Wait
    and No Operation do), ``start`` (a trigger: the event's ``items``, else one empty item),
    ``loop`` (Loop Over Items, see ``_loop_outputs``), ``no_items_left`` (an If asking a loop
    whether it is done)."""
    params = _state(context)["graph"][route]
    if params["how"] == "no_items_left":
        state = _no_items_left(context, params)
    else:
        state = _advance(context, event, params)
    _watch_idle(state, params)
    return {KEY: state}


# -- a loop in which no node does any work ------------------------------------------------------

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
    if state["current"] == current and state["loops"] == loops and \
            len(state["stack"]) >= len(stack) and state["stack"][:taken] == stack[:taken] and \
            (state["waiting"] == waiting or
             (low > 0 and _waiting_grew(waiting, state["waiting"]))):
        state["forever"] = True
    steps = watch["steps"] + 1
    if steps == watch["power"]:
        watch = {"saved": now, "low": len(state["stack"]), "power": 2 * watch["power"],
                 "steps": 0}
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
    for target, slots, *_ in now:
        old = before.pop(target, None)
        if old is None or len(slots) < len(old) or slots[:len(old)] != old:
            return False  # a Merge that started waiting (or whose rounds changed)
        if len(slots) > len(old) and len({_missing(slot) for slot in slots}) != 1:
            return False
    return not before


def _missing(slot: list[Any]) -> tuple[int, ...]:
    return tuple(i for i, items in enumerate(slot) if items is None)


def loops_forever(context: Any, event: Any) -> bool:
    """True when the idle routes have been found going round for ever (see ``_watch_idle``)."""
    return bool(_state(context).get("forever"))


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

def _loop_outputs(state: dict[str, Any], params: Mapping[str, Any]) -> list[Items]:
    """n8n's splitInBatches: the first visit stores the items and hands out the first batch;
    each later visit adds the items that came back to the processed ones and hands out the
    next batch; when none is left the processed items go to the done output (v2/v3; v1 has
    only the loop output and stops there, and, as n8n's V1, keeps no processed items)."""
    node = params["node"]
    size = int(params.get("batch_size", 1))
    loop_output, done_output = params.get("loop_output", 0), params.get("done_output")
    entry = state["current"]
    items = list(entry[1][0]) if entry and entry[1] else []
    memory = state["loops"].get(node)
    # v2/v3 start again when new items arrive after they were done (a loop inside a loop);
    # v1 only on its first visit
    if memory is None or (done_output is not None and memory.get("done") and items):
        batch, rest = items[:size], items[size:]
        memory = {"items": rest, "processed": []}
    else:
        batch, rest = memory["items"][:size], memory["items"][size:]
        processed = memory["processed"] + items if done_output is not None else []
        memory = {"items": rest, "processed": processed}
    memory["no_items_left"] = not memory["items"]
    count = 2 if done_output is not None else 1
    outputs: list[Items] = [[] for _ in range(count)]
    memory["done"] = not batch
    if batch:
        outputs[loop_output] = batch
    elif done_output is not None:
        outputs[done_output] = memory["processed"]
    state["loops"][node] = memory
    return outputs


def _no_items_left(context: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    state = _state(context)
    entry = state["current"]
    items = list(entry[1][0]) if entry and entry[1] else []
    memory = state["loops"].get(params["loop"]) or {}
    outputs = _always_output([items, []] if memory.get("no_items_left") else [[], items],
                             params)
    state["last"] = outputs[0]
    _schedule(state, outputs, params.get("children", ()))
    return _pop(state)


INPUT_MARK = "$n8n"


def with_inputs(config: Any) -> Any:
    """``config`` with every invoke ``input`` written ``{"$n8n": "items"}`` (or ``"inputs"``)
    replaced by the function reading the current node's items, and the machine ``output``
    ``{"$n8n": "output"}`` by ``last_items``: a JSON config cannot hold the functions, so
    loading the machine puts them in."""
    if isinstance(config, Mapping):
        mark = config.get(INPUT_MARK)
        if len(config) == 1 and mark in ("items", "inputs"):
            return node_input(mark)
        if len(config) == 1 and mark == "output":
            return last_items
        return {key: with_inputs(value) for key, value in config.items()}
    if isinstance(config, list):
        return [with_inputs(value) for value in config]
    return config
