"""The diagram of a machine, independent of the output format: boxes with readable titles,
descriptions and detail lines, arrows with readable labels and a kind (normal, error, retry),
which states a snapshot has active, the columns a deep chart wraps into and the legend it needs.
``graphviz.py`` and ``mermaid.py`` only lay this out in their syntax, so both formats always
say the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .. import retrying
from ..machine import Machine
from ..nodes import COMPOUND, FINAL, HISTORY, PARALLEL, InvokeDef, StateNode, Transition
from ..snapshot import Snapshot
from . import labels
from .retries import retry_phrase

NORMAL, ERROR, RETRY = "normal", "error", "retry"
# Change marks, set by a machine diff (``statecharts.diff``) on the new machine's diagram.
ADDED, REMOVED, CHANGED = "added", "removed", "changed"
_MARK_MEANINGS = ((ADDED, "added"), (REMOVED, "removed (dashed)"), (CHANGED, "changed: old → new"))
# A final state whose name or tags say so is a failure outcome and drawn as an error path.
_FAILURE_WORDS = ("fail", "error", "abort")
_FAILURE_TAGS = frozenset({"error", "failed", "failure"})
# A chart whose longest path takes more rows than this wraps into columns side by side.
_COLUMN_ROWS = 11


@dataclass(frozen=True)
class Box:
    """A state as drawn: its name as words, the author's description (smaller, below it),
    detail lines (invoked work, how the call is protected, entry/exit actions), and flags."""

    node: StateNode
    title: str
    description: str | None
    details: tuple[str, ...]
    now: tuple[str, ...]  # a highlighted run's progress here ("now: 1 of 4 tries failed")
    failed: bool  # drawn red: a failure outcome
    run_fails: bool  # a failure final: reaching it ends the run as failed
    active: bool
    region: bool  # a region of a parallel state: drawn side by side in a dashed box
    mark: str | None = None  # ADDED, REMOVED or CHANGED on a diff's diagram
    changes: tuple[str, ...] = ()  # what changed here, "old → new" (drawn in the mark's colour)


@dataclass(frozen=True)
class Arrow:
    """One arrow: ``source`` -> ``target`` with label lines; ``raw`` is the event as written."""

    source: StateNode
    target: StateNode
    lines: tuple[str, ...]
    kind: str
    raw: str
    mark: str | None = None  # ADDED, REMOVED or CHANGED on a diff's diagram
    changes: tuple[str, ...] = ()  # what changed on this arrow, "old → new"
    fallback: bool = False  # unguarded, after guarded arrows for the same event
    routed: bool = False  # taken automatically when a guard drawn as nothing passes


@dataclass(frozen=True)
class Diagram:
    """Everything a renderer needs, in document order."""

    machine_id: str
    title: str
    root: StateNode
    boxes: Mapping[StateNode, Box]
    arrows: tuple[Arrow, ...]
    highlighted: bool
    columns: Mapping[StateNode, int]  # a deep chart's top-level states by column (0, 1, ..)
    error_workflow: str | None  # what a failed run starts, as words
    # A diff's diagram: boxes that are not in the drawn machine (removed states, a note of
    # workflow-wide changes), by the state they are drawn in; their boxes are in ``boxes``.
    extra: Mapping[StateNode, tuple[StateNode, ...]] = field(default_factory=dict)

    def box(self, node: StateNode) -> Box:
        """The box of ``node``."""
        return self.boxes[node]

    def kinds(self) -> frozenset[str]:
        """The arrow kinds present (the legend shows only what the diagram uses)."""
        return frozenset(a.kind for a in self.arrows)

    def marks(self) -> frozenset[str]:
        """The change marks present (on a diff's diagram)."""
        boxes = (b.mark for b in self.boxes.values())
        return frozenset(m for m in (*boxes, *(a.mark for a in self.arrows)) if m is not None)

    def legend(self) -> tuple[tuple[str, str], ...]:
        """The key: (symbol kind, meaning) for each symbol this diagram uses, and only those.
        Kinds: start, final, history, parallel, error, run_fails, retry, active, and a diff's
        change marks ADDED, REMOVED, CHANGED."""
        nodes = self.boxes.keys()
        rows = []
        if any(n.type == COMPOUND for n in nodes):
            rows.append(("start", "where it starts"))
        if any(n.type == FINAL for n in nodes):
            rows.append(("final", "finished"))
        if any(n.type == HISTORY for n in nodes):
            rows.append(("history", "resumes where it left off (H*: nested too)"))
        if any(n.type == PARALLEL for n in nodes):
            rows.append(("parallel", "dashed boxes run at the same time"))
        if ERROR in self.kinds() or any(b.failed for b in self.boxes.values()):
            rows.append(("error", "error path"))
        if any(b.run_fails for b in self.boxes.values()):
            rows.append(("run_fails", "red end: the run fails"))
        if RETRY in self.kinds():
            rows.append(("retry", "automatic retry"))
        if self.highlighted:
            rows.append(("active", "where the run is now"))
        marks = self.marks()
        rows += [(mark, text) for mark, text in _MARK_MEANINGS if mark in marks]
        return tuple(rows)


def build_diagram(machine: Machine, snapshot: Snapshot | None = None) -> Diagram:
    """The diagram of ``machine``, with ``snapshot``'s active states marked."""
    active = _active_ids(machine, snapshot)
    nodes = machine.definition.nodes
    failed = _failed_finals(nodes)
    run_fails = frozenset(n for n in nodes if _failure_reason(machine, n) is not None)
    failed |= run_fails
    work = _work_phrases(machine)
    progress = _retry_progress(snapshot)
    boxes = {
        node: Box(
            node,
            labels.state_title(node),
            labels.state_description(node),
            _details(machine, node, work),
            progress.get(node.id, ()),
            node in failed,
            node in run_fails,
            node.id in active,
            node.parent is not None and node.parent.type == "parallel",
        )
        for node in nodes
    }
    arrows: list[Arrow] = []
    for node in nodes:
        guarded: dict[str | None, bool] = {}  # events with a guarded branch seen so far,
        # and whether a guard of theirs is drawn (then the fallback says "otherwise")
        for transition in (*node.transitions, *node.always):
            fallback = transition.guard is None and transition.event in guarded
            if transition.guard is not None:
                guarded[transition.event] = guarded.get(transition.event, False) or bool(
                    labels.guard_phrase(transition.guard)
                )
            routed = (
                transition.event is None
                and transition.guard is not None
                and not labels.guard_phrase(transition.guard)
            )
            arrows.extend(
                replace(arrow, fallback=fallback, routed=routed)
                for arrow in _arrows(
                    machine, transition, work, failed, fallback and guarded[transition.event]
                )
            )
        for default in node.history_default:
            arrows.append(Arrow(node, default, ("the first time",), NORMAL, "history default"))
    arrows = _collapse_fan_out(_collapse_fallbacks(arrows, boxes), boxes)
    title = labels.sentence(labels.humanize(machine.id))
    return Diagram(
        machine.id,
        title,
        machine.root,
        boxes,
        tuple(arrows),
        snapshot is not None,
        _columns(machine.root, arrows),
        _error_workflow(machine),
    )


FAN_IN = 4  # identical "otherwise" arrows into one state drawn as one line in its box


def _collapse_fallbacks(arrows: list[Arrow], boxes: dict[StateNode, Box]) -> list[Arrow]:
    """Many unguarded arrows with the same words into one state, some of them fallbacks
    after guarded arrows (an imported n8n workflow's "no items go on" from every node), become
    one line in that state's box: the arrows that differ stay readable. Two are enough when
    all are fallbacks after guards drawn as nothing (``guards.described``)."""
    groups: dict[tuple[StateNode, tuple[str, ...], str], list[Arrow]] = {}
    for arrow in arrows:
        lines = arrow.lines[:-1] if arrow.lines[-1:] == ("otherwise",) else arrow.lines
        if "[" not in arrow.raw and lines and arrow.source is not arrow.target:
            groups.setdefault((arrow.target, lines, arrow.kind), []).append(arrow)
    dropped: set[int] = set()
    for (target, lines, _), group in groups.items():
        # fallbacks after guards that say nothing (bookkeeping) are collapsed from two on:
        # their arrows only repeat what each state's own arrows leave unsaid
        quiet = all(a.lines[-1:] != ("otherwise",) for a in group)
        if len(group) < (2 if quiet else FAN_IN) or not any(a.fallback for a in group):
            continue
        dropped.update(id(arrow) for arrow in group)
        box = boxes[target]
        words = " ".join(lines)
        boxes[target] = replace(box, details=(*box.details, f"from {len(group)} states: {words}"))
    return [arrow for arrow in arrows if id(arrow) not in dropped]


FAN_OUT = 8  # more automatic arrows than this out of one state, each picked by a guard
# drawn as nothing, become one line in its box


def _collapse_fan_out(arrows: list[Arrow], boxes: dict[StateNode, Box]) -> list[Arrow]:
    """A state that goes on at once to any of many states, each picked by bookkeeping whose
    guard is drawn as nothing and labelled alike (an imported n8n workflow's ``next_branch``
    in n8n's legacy order: "resume 'X'" for whichever node its execution stack holds next),
    says so in one line of its box, naming them, instead of an arrow across the chart to
    each; its other arrows stay."""
    routed: dict[tuple[StateNode, str], list[Arrow]] = {}
    for arrow in arrows:
        if arrow.routed and arrow.source is not arrow.target and arrow.lines:
            word = arrow.lines[0].split(" ", 1)[0]
            routed.setdefault((arrow.source, word), []).append(arrow)
    dropped: set[int] = set()
    for (source, word), group in routed.items():
        if len(group) <= FAN_OUT:
            continue
        dropped.update(id(arrow) for arrow in group)
        names = ", ".join(dict.fromkeys(boxes[a.target].title for a in group))
        box = boxes[source]
        boxes[source] = replace(
            box, details=(*box.details, f"then one of {len(group)} ({word} …): {names}")
        )
    return [arrow for arrow in arrows if id(arrow) not in dropped]


def _error_workflow(machine: Machine) -> str | None:
    """The error workflow a failed run starts (``meta.error_workflow`` at the root)."""
    meta = machine.root.meta
    name = meta.get("error_workflow") if isinstance(meta, Mapping) else None
    return labels.sentence(labels.humanize(name)) if isinstance(name, str) and name else None


def _columns(root: StateNode, arrows: list[Arrow]) -> dict[StateNode, int]:
    """For a deep chart, the column of each top-level state, so that the chart wraps into
    columns of at most about ``_COLUMN_ROWS`` rows instead of one tall strip; empty when one
    column is enough. A state's row is the longest path of rows above it from the start."""
    if root.type == PARALLEL or root.initial is None:
        return {}
    following: dict[StateNode, list[StateNode]] = {}
    for arrow in arrows:
        source, target = _top(arrow.source), _top(arrow.target)
        if arrow.source is not root and source is not target:
            following.setdefault(source, []).append(target)
    heights: dict[StateNode, int] = {}
    rows = _start_rows(following, root.initial, heights)
    total = max(row + _height(node, heights) for node, row in rows.items())
    if total <= _COLUMN_ROWS:
        return {}
    count = -(-total // _COLUMN_ROWS)
    # by the middle row of each state, so a tall state goes where most of it would be
    return {
        node: min(count - 1, int((rows.get(node, 0) + _height(node, heights) / 2) * count / total))
        for node in root.regions
    }


def _start_rows(
    following: Mapping[StateNode, list[StateNode]], start: StateNode, heights: dict[StateNode, int]
) -> dict[StateNode, int]:
    """The row each state reached from ``start`` begins at: the most rows on a path to it
    (back edges, found by depth-first search, left out)."""
    order: list[StateNode] = []  # post-order: each node after everything it leads to
    done: set[StateNode] = set()
    on_path: set[StateNode] = set()
    forward: dict[StateNode, list[StateNode]] = {}

    def visit(node: StateNode) -> None:
        on_path.add(node)
        for target in following.get(node, []):
            if target in on_path:
                continue  # a loop back: does not push its target down
            forward.setdefault(node, []).append(target)
            if target not in done:
                visit(target)
        on_path.discard(node)
        done.add(node)
        order.append(node)

    visit(start)
    rows = dict.fromkeys(order, 0)
    for node in reversed(order):
        for target in forward.get(node, []):
            rows[target] = max(rows[target], rows[node] + _height(node, heights))
    return rows


def _top(node: StateNode) -> StateNode:
    """The top-level state holding ``node`` (or ``node`` itself, for the root)."""
    return node.ancestors[-2] if len(node.ancestors) >= 2 else node


def _height(node: StateNode, heights: dict[StateNode, int]) -> int:
    """Rows a state takes (memoized in ``heights``): 1, or for a nested state its start row
    plus the longest path of rows inside it (regions side by side: the tallest)."""
    if node in heights:
        return heights[node]
    if not node.children:
        height = 1
    elif node.type == PARALLEL:
        height = max(_height(region, heights) for region in node.regions)
    else:
        inner: dict[StateNode, list[StateNode]] = {}
        for child in node.regions:
            for transition in (*child.transitions, *child.always):
                inner.setdefault(child, []).extend(
                    t for t in transition.targets if t.parent is node and t is not child
                )
        rows = _start_rows(inner, node.initial or node.regions[0], heights)
        height = 1 + max(row + _height(child, heights) for child, row in rows.items())
    heights[node] = height
    return height


def _active_ids(machine: Machine, snapshot: Snapshot | None) -> frozenset[str]:
    if snapshot is None:
        return frozenset()
    if snapshot.machine.fingerprint != machine.fingerprint:
        raise ValueError(
            f"the snapshot belongs to machine {snapshot.machine.id!r} "
            f"({snapshot.machine.fingerprint}), not to {machine.id!r} "
            f"({machine.fingerprint})"
        )
    return snapshot.configuration.ids


def _retry_progress(snapshot: Snapshot | None) -> dict[str, tuple[str, ...]]:
    """For a highlighted run, how its retried calls are doing: "now: 1 of 4 tries failed
    (Timeout)", by retried state id."""
    if snapshot is None:
        return {}
    found: dict[str, tuple[str, ...]] = {}
    for state_id, record in snapshot.retries.items():
        node = snapshot.machine.definition.by_id[state_id]
        error = record.get("last_error")
        name = error.get("name") or error.get("message") if isinstance(error, Mapping) else None
        limit = f" of {node.retry.max_attempts}" if node.retry is not None else ""
        reason = f" ({str(name)[:40]})" if name else ""
        found[state_id] = (f"now: {record['attempt']}{limit} tries failed{reason}",)
    return found


def _failed_finals(nodes: tuple[StateNode, ...]) -> frozenset[StateNode]:
    """Final states that are failure outcomes: named or tagged so, or only reached by errors."""
    reached_by: dict[StateNode, list[bool]] = {}
    for node in nodes:
        for transition in (*node.transitions, *node.always):
            for target in transition.targets:
                reached_by.setdefault(target, []).append(labels.is_error_event(transition.event))
    failed = set()
    for node in nodes:
        if node.type != FINAL:
            continue
        named = any(word in node.key.lower() for word in _FAILURE_WORDS)
        sources = reached_by.get(node, [])
        if named or node.tags & _FAILURE_TAGS or (sources and all(sources)):
            failed.add(node)
    return frozenset(failed)


def _work_phrases(machine: Machine) -> dict[str, str]:
    """What each invoke does, by invoke id: its ``description`` (read from the config, as the
    state-node tree does not keep it), else its humanized ``src``."""
    found: dict[str, str] = {}
    for node in machine.definition.nodes:
        for invoke in node.invoke:
            description = _invoke_config(machine, node, invoke).get("description")
            found[invoke.id] = labels.invoke_phrase(
                invoke, description if isinstance(description, str) else None
            )
    return found


def _invoke_config(machine: Machine, node: StateNode, invoke: InvokeDef) -> Mapping[str, Any]:
    """The config an invoke was written as (for an expanded retry's ``attempting`` state:
    the retried state's invoke)."""
    item = _config_at(machine.config, invoke.config_path)
    if node.retry_attempt_of is not None:
        item = _retried_invoke(_config_at(machine.config, node.retry_attempt_of.config_path))
    return item if isinstance(item, Mapping) else {}


def _failure_reason(machine: Machine, node: StateNode) -> str | None:
    """For a failure final (``"failure": true`` or ``"failure": "reason"``), what the diagram
    says: "the run fails" with the reason; None for other states."""
    if node.type != FINAL:
        return None
    config = _config_at(machine.config, node.config_path)
    failure = config.get("failure") if isinstance(config, Mapping) else None
    if failure is True:
        return "the run fails"
    if isinstance(failure, str) and failure:
        return f"the run fails: {failure}"
    return None


def _call_facts(machine: Machine, node: StateNode) -> list[str]:
    """How the calls made here are protected, one line per fact: errors never retried (or
    the only ones retried), the circuit breaker, the shared limit, each try's timeout and
    heartbeat, the idempotency key, and the errors that roll the step back to be tried again
    later. A retried state shows its call's
    facts (its ``attempting`` state only shows what it does)."""
    if node.retry_attempt_of is not None:
        return []
    calls = list(node.invoke)
    policy = node.retry
    attempting: StateNode | None = None
    if policy is not None:
        attempting = next((c for c in node.children if c.retry_attempt_of is node), None)
        calls = list(attempting.invoke) if attempting is not None else []
    owner = node if attempting is None else attempting
    lines = []
    if policy is not None and policy.non_retryable:
        lines.append(f"never retried: {', '.join(policy.non_retryable)}")
    if policy is not None and policy.retry_on:
        lines.append(f"retried only on: {', '.join(policy.retry_on)}")
    for invoke in calls:
        child = _child_machine(machine, invoke)
        if child is not None:
            lines.append(f"sub-workflow “{child}”: a run of its own when durable")
        if invoke.breaker:
            lines.append(f"circuit breaker “{invoke.breaker}”: fails fast while open")
        if invoke.limit:
            lines.append(f"limited by “{invoke.limit}”: waits for capacity")
        if invoke.timeout_ms is not None:
            lines.append(f"each try times out after {labels.duration(invoke.timeout_ms)}")
        if invoke.heartbeat_ms is not None:
            lines.append(f"fails if silent for {labels.duration(invoke.heartbeat_ms)} (heartbeat)")
        if getattr(invoke.logic, "wants_key", False):
            lines.append(
                "idempotency key: the same on every try"
                if policy is not None
                else "idempotency key: the same if the step runs again"
            )
        transient = _invoke_config(machine, owner, invoke).get("transient")
        if transient is True:
            lines.append("on any error: rolled back, tried again later")
        elif isinstance(transient, list | tuple) and transient:
            lines.append(f"on {', '.join(map(str, transient))}: rolled back, tried again later")
    return lines


def _child_machine(machine: Machine, invoke: InvokeDef) -> str | None:
    """The id of the machine `invoke` runs as a child, if it runs one (not a function)."""
    logic = invoke.logic
    if logic is None:
        try:
            logic = machine.resolve_actor(invoke.src)[1]
        except Exception:  # a placeholder or an unknown name: not drawn as a sub-workflow
            return None
    return logic.id if isinstance(logic, Machine) else None


def _retried_invoke(state_config: Any) -> Any:
    """The invoke config with ``retry`` in a state's config."""
    invokes = state_config.get("invoke") if isinstance(state_config, Mapping) else None
    items = invokes if isinstance(invokes, list) else [invokes]
    return next((i for i in items if isinstance(i, Mapping) and i.get("retry") is not None), None)


def _config_at(config: Any, path: str) -> Any:
    """The config item at a definition path such as ``states.a.invoke[1]``."""
    item = config
    for part in path.split(".") if path else ():
        index = None
        if part.endswith("]") and "[" in part:
            part, _, rest = part.partition("[")
            index = int(rest[:-1])
        item = item.get(part) if isinstance(item, Mapping) else None
        if index is not None:
            item = item[index] if isinstance(item, list) and index < len(item) else None
    return item


def _details(machine: Machine, node: StateNode, work: Mapping[str, str]) -> tuple[str, ...]:
    """The lines under a state's title: invoked work, entry/exit actions, and the events it
    handles without leaving (drawn inside the box, since a loop would suggest re-entering)."""
    if node.type == HISTORY:
        return ()
    lines = [f"doing: {work[invoke.id]}" for invoke in node.invoke]
    lines += _call_facts(machine, node)
    if node.retry is not None and not any(_is_final_failure(t) for t in node.transitions):
        lines.append("if it still fails: the run fails")  # the error is not handled
    reason = _failure_reason(machine, node)
    if reason is not None:
        lines.append(reason)
    entry = labels.actions_phrase(node.entry)
    if entry:
        lines.append(f"on entry: {entry}")
    exit_ = labels.actions_phrase(node.exit)
    if exit_:
        lines.append(f"on exit: {exit_}")
    for transition in (*node.transitions, *node.always):
        then = labels.actions_phrase(transition.actions)
        if not transition.targets and then:
            said = labels.guard_phrase(transition.guard) if transition.guard else ""
            condition = f", {said}" if said else ""
            lines.append(f"on {_trigger(machine, transition, work)}{condition}: {then}")
    return tuple(lines)


def _is_retry(transition: Transition) -> bool:
    """The expanded retry's "failed, but another attempt is allowed" transition."""
    return retrying.is_retry_transition(transition)


def _is_final_failure(transition: Transition) -> bool:
    """A retried state's transition for a failure after the last allowed attempt."""
    return (
        transition.source.retry is not None
        and labels.is_error_event(transition.event)
        and not _is_retry(transition)
    )


def _arrows(
    machine: Machine,
    transition: Transition,
    work: Mapping[str, str],
    failed: frozenset[StateNode],
    otherwise: bool,
) -> list[Arrow]:
    source = transition.source
    raw = _raw(transition)
    if _is_retry(transition):  # drawn as the loop attempting -> waiting to retry -> attempting
        attempting, waiting = (source.initial, *transition.targets)
        assert attempting is not None and source.retry is not None
        return [Arrow(attempting, waiting, tuple(retry_phrase(source.retry)), RETRY, raw)]
    if retrying.is_retry_delay(transition.delay):
        return [
            Arrow(source, target, ("after the wait,", "tries again"), RETRY, raw)
            for target in transition.targets
        ]
    if not transition.targets:
        return []  # stays in its state: listed inside the state's box, if it does anything
    lines = _transition_lines(machine, transition, work, otherwise)
    kind = ERROR if labels.is_error_event(transition.event) else NORMAL
    return [
        Arrow(source, target, lines, ERROR if target in failed else kind, raw)
        for target in transition.targets
    ]


def _transition_lines(
    machine: Machine, transition: Transition, work: Mapping[str, str], otherwise: bool
) -> tuple[str, ...]:
    lines = [_trigger(machine, transition, work)]
    if labels.is_error_event(transition.event) and retrying.is_skip_transition(
        transition
    ):  # with or without retry
        lines.append("skip this item")
    if transition.guard is not None:
        said = labels.guard_phrase(transition.guard)
        lines += [said] if said else []
    elif otherwise and not _is_final_failure(transition):  # "still fails" says it already
        lines.append("otherwise")
    then = labels.actions_phrase(transition.actions)
    if then:
        lines.append(f"then: {then}")
    return tuple(lines)


def _trigger(machine: Machine, transition: Transition, work: Mapping[str, str]) -> str:
    if transition.description:
        return transition.description
    if transition.event is None:
        return "automatically"
    if transition.delay is not None:
        return labels.delay_phrase(transition.delay, machine.implementations.delays)
    done = labels.done_phrase(transition.event, transition.source, work)
    if done is not None and _is_final_failure(transition):
        return done.replace(" fails", " still fails")
    return done if done is not None else labels.event_phrase(transition.event)


def _raw(transition: Transition) -> str:
    event = "always" if transition.event is None else transition.event
    guard = ""
    if transition.guard is not None:
        guard = f" [{', '.join(transition.guard.names()) or transition.guard.type}]"
    return event + guard
