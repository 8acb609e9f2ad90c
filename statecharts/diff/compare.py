"""The semantic comparison of two machine definitions.

States are matched by their path below the root; a state whose path changed is matched when
an explicit hint says so (``renames=`` or ``"meta": {"renamed_from": "old.path"}`` on the new
state), when the new definition's migration moves a run from it, or when a state of the same
name moved under another parent. The steps a retry adds (``attempting``, ``waiting_to_retry``)
are compared as the retry policy, not as states. Transitions are matched per state and trigger
(event, ``always``, ``after``): first equal guard and targets, then equal guard, then in order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from ..frozen import thaw
from ..machine import Machine
from ..nodes import StateNode, Transition
from ..render import labels
from ..retry_policy import RetryPolicy, as_policy
from ..retrying import (
    is_added_action,
    is_retry_delay,
    is_retry_step,
    is_retry_transition,
    is_skip_transition,
)
from ..snapshot import FORMAT
from .changes import (
    ACTIONS,
    ADDED,
    BREAKER,
    CHANGED,
    CONTEXT,
    ENTRY,
    ERROR_WORKFLOW,
    EXIT,
    FAILURE,
    GUARD,
    INITIAL,
    INVOKE,
    MACHINE_ID,
    MOVED,
    REMOVED,
    RENAMED,
    RETRY,
    STATE,
    TAGS,
    TARGET,
    TIMER,
    TRANSITION,
    TYPE,
    VERSION,
    Change,
    MachineDiff,
    state_path,
)
from .words import json_text, retry_change, retry_words, value_text

ARROW = " → "
RENAMED_FROM = "renamed_from"  # the new state's meta key naming its old path


def diff_machines(
    old: Machine, new: Machine, renames: Mapping[str, str] | None = None
) -> MachineDiff:
    """What changed from ``old`` to ``new``. ``renames`` maps old state paths to new ones
    (a hint for renames the definitions cannot tell; ValueError if a path does not exist)."""
    return _Comparison(old, new, dict(renames or {})).run()


class _Comparison:
    def __init__(self, old: Machine, new: Machine, renames: dict[str, str]) -> None:
        self.old, self.new = old, new
        self.old_nodes = _by_path(old)
        self.new_nodes = _by_path(new)
        self.hints = renames
        self.matched: dict[str, str] = {}
        self.renamed: dict[str, str] = {}
        self.migrated_to: dict[str, str] = {}
        self.changes: list[Change] = []
        self.changed_states: set[str] = set()

    def run(self) -> MachineDiff:
        self._match()
        self._workflow()
        targets = set(self.matched.values())
        old_of = {new: old for old, new in self.matched.items()}
        for path, node in self.new_nodes.items():
            if path in targets:
                self._state(self.old_nodes[old_of[path]], node)
            elif (
                not _generated(node)
                or node.parent is None
                or state_path(node.parent) not in targets
            ):
                self._add(
                    Change(
                        ADDED, STATE, path, f"new {_kind_word(node)} “{_name(node)}”", new_node=node
                    )
                )
        for path, node in self.old_nodes.items():
            if path in self.matched or (
                _generated(node)
                and node.parent is not None
                and state_path(node.parent) in self.matched
            ):
                continue
            moved = self.migrated_to.get(path)
            then = f"; the migration moves its runs to {moved}" if moved else ""
            self._add(
                Change(
                    REMOVED,
                    STATE,
                    path,
                    f"{_kind_word(node)} “{_name(node)}” removed{then}",
                    old_node=node,
                )
            )
        return MachineDiff(
            self.old,
            self.new,
            tuple(self.changes),
            dict(self.matched),
            dict(self.renamed),
            dict(self.migrated_to),
            frozenset(self.changed_states),
        )

    def _add(self, change: Change) -> None:
        self.changes.append(change)
        if change.mark != ADDED and change.old_node is not None and change.kind != STATE:
            self.changed_states.add(state_path(change.old_node))

    # -- matching states ---------------------------------------------------------------------

    def _match(self) -> None:
        for old_path, new_path in self.hints.items():
            for path, nodes, side in (
                (old_path, self.old_nodes, "old"),
                (new_path, self.new_nodes, "new"),
            ):
                if path not in nodes:
                    raise ValueError(
                        f"rename {old_path}={new_path}: the {side} machine has no state {path!r}"
                    )
            self._pair(old_path, new_path, "hint")
        for new_path, node in self.new_nodes.items():
            hinted = node.meta.get(RENAMED_FROM) if isinstance(node.meta, Mapping) else None
            if isinstance(hinted, str) and hinted in self.old_nodes and hinted not in self.matched:
                self._pair(hinted, new_path, "hint")
        taken = set(self.matched.values())
        for path in self.old_nodes:
            if path not in self.matched and path in self.new_nodes and path not in taken:
                self.matched[path] = path
        self._match_by_migration()
        self._match_moves()

    def _pair(self, old_path: str, new_path: str, why: str) -> None:
        """Match a renamed or moved state, and the states inside it by their relative path."""
        self.matched[old_path] = new_path
        if old_path != new_path:
            self.renamed[old_path] = why
        taken = set(self.matched.values())
        for path in self.old_nodes:
            if path.startswith(old_path + "."):
                inner = new_path + path[len(old_path) :]
                if inner in self.new_nodes and path not in self.matched and inner not in taken:
                    self.matched[path] = inner

    def _unmatched(self) -> tuple[list[str], set[str]]:
        removed = [
            p for p, n in self.old_nodes.items() if p not in self.matched and not _generated(n)
        ]
        added = set(self.new_nodes) - set(self.matched.values())
        return removed, added

    def _match_by_migration(self) -> None:
        """A removed state is renamed to the added state the new definition's migration moves
        its runs to (probed with a snapshot in that state); moved to an existing state, it
        stays removed and the report says where its runs go."""
        migrate = _migration(self.old, self.new)
        if migrate is None:
            return
        removed, added = self._unmatched()
        for path in removed:
            landed = _probe(self.old, self.old_nodes[path], migrate)
            if landed is None or landed not in self.new_nodes:
                continue
            if landed in added:
                self._pair(path, landed, f"migration from {self.old.version!r}")
                removed, added = self._unmatched()
            else:
                self.migrated_to[path] = landed

    def _match_moves(self) -> None:
        """A removed and an added state with the same name, each the only one, moved."""
        removed, added = self._unmatched()
        for path in removed:
            key = self.old_nodes[path].key
            same_old = [p for p in removed if self.old_nodes[p].key == key]
            same_new = [p for p in sorted(added) if self.new_nodes[p].key == key]
            if len(same_old) == 1 and len(same_new) == 1 and path not in self.matched:
                self._pair(path, same_new[0], MOVED)
                removed, added = self._unmatched()

    # -- the workflow as a whole -------------------------------------------------------------

    def _workflow(self) -> None:
        old, new = self.old, self.new
        if old.id != new.id:
            self._add(
                Change(
                    CHANGED,
                    MACHINE_ID,
                    "",
                    f"machine id {old.id}{ARROW}{new.id} "
                    "(runs are found by workflow name: this is a new workflow)",
                )
            )
        if old.version != new.version:
            self._add(
                Change(
                    CHANGED,
                    VERSION,
                    "",
                    f"version {value_text(old.version)}{ARROW}{value_text(new.version)}",
                )
            )
        before, after = _error_workflow(old), _error_workflow(new)
        if before != after:
            self._add(
                Change(
                    _mark(before, after),
                    ERROR_WORKFLOW,
                    "",
                    f"error workflow {value_text(before)}{ARROW}{value_text(after)}",
                )
            )
        for mark, text in _context_changes(old.definition.context, new.definition.context):
            self._add(Change(mark, CONTEXT, "", text))

    # -- one state present in both -----------------------------------------------------------

    def _state(self, old: StateNode, new: StateNode) -> None:
        if _generated(new):
            return  # compared as its state's retry policy
        where = state_path(new)
        old_path = state_path(old)

        def add(kind: str, text: str, mark: str = CHANGED, **nodes: Any) -> None:
            self._add(Change(mark, kind, where, text, old_node=old, new_node=new, **nodes))

        if old_path != where:
            why = self.renamed.get(old_path)
            if why is not None:
                kind = MOVED if why == MOVED else RENAMED
                reason = "" if why == MOVED else f" ({why})"
                add(kind, f"{kind} from {old_path}{reason}")
        if _written_type(old) != _written_type(new):
            add(TYPE, f"{_kind_word(old)}{ARROW}{_kind_word(new)}")
        if (
            old.initial is not None
            and new.initial is not None
            and self.matched.get(state_path(old.initial)) != state_path(new.initial)
        ):
            add(INITIAL, f"starts at {state_path(old.initial)}{ARROW}{state_path(new.initial)}")
        for kind, before, after in ((ENTRY, old.entry, new.entry), (EXIT, old.exit, new.exit)):
            names = _action_names(before), _action_names(after)
            if names[0] != names[1]:
                add(kind, f"on {kind}: {_list(names[0])}{ARROW}{_list(names[1])}")
        if old.tags != new.tags:
            add(TAGS, f"tags {_list(sorted(old.tags))}{ARROW}{_list(sorted(new.tags))}")
        failure = _failure(self.old, old), _failure(self.new, new)
        if old.type == new.type == "final" and failure[0] != failure[1]:
            add(FAILURE, f"ends the run as {failure[0]}{ARROW}{failure[1]}")
        self._calls(old, new, add)
        self._transitions(old, new)

    def _calls(self, old: StateNode, new: StateNode, add: Callable[..., None]) -> None:
        """The state's invokes (call sites), by id: what they do, their retry policy, breaker,
        failure classes and whether they are external."""
        before, after = _calls(self.old, old), _calls(self.new, new)
        for call_id, config in before.items():
            if call_id not in after:
                add(INVOKE, f"no longer does: {_doing(config)}", REMOVED)
        for call_id, config in after.items():
            was = before.get(call_id)
            if was is None:
                add(INVOKE, f"now does: {_doing(config)}", ADDED)
                if config.get("retry") is not None:
                    add(RETRY, f"no retries{ARROW}{retry_words(_policy(config))}", ADDED)
                continue
            if _doing(was) != _doing(config):
                add(INVOKE, f"doing: {_doing(was)}{ARROW}{_doing(config)}")
            old_policy, new_policy = _policy(was), _policy(config)
            if old_policy != new_policy:
                mark = _mark(old_policy, new_policy)
                add(RETRY, retry_change(old_policy, new_policy), mark)
            for key, kind, words in _CALL_FIELDS:
                if callable(was.get(key)) != callable(config.get(key)):
                    continue  # data on one side, code on the other: nothing to compare
                if _field(was, key) != _field(config, key):
                    add(
                        kind,
                        f"{words}: {value_text(_field(was, key))}{ARROW}"
                        f"{value_text(_field(config, key))}",
                        _mark(_field(was, key), _field(config, key)),
                    )
            outcome = _final_failure(was), _final_failure(config)
            if outcome[0] != outcome[1]:
                add(FAILURE, f"when it still fails: {outcome[0]}{ARROW}{outcome[1]}")

    # -- transitions -------------------------------------------------------------------------

    def _transitions(self, old: StateNode, new: StateNode) -> None:
        groups: dict[str, tuple[list[Transition], list[Transition]]] = {}
        for side, node in ((0, old), (1, new)):
            for transition in _user_transitions(node):
                groups.setdefault(_trigger_key(transition), ([], []))[side].append(transition)
        for before, after in groups.values():
            for pair_of in (self._same_guard_and_targets, _same_guard, _any):
                pairs = [(b, a) for b in before for a in after if pair_of(b, a)]
                for b, a in pairs:
                    if b in before and a in after:
                        before.remove(b)
                        after.remove(a)
                        self._transition_pair(b, a)
            for transition in before:
                self._add(
                    Change(
                        REMOVED,
                        TRANSITION,
                        state_path(new),
                        f"{_transition_words(self.old, transition)} removed",
                        old_node=old,
                        new_node=new,
                        old_transition=transition,
                    )
                )
            for transition in after:
                self._add(
                    Change(
                        ADDED,
                        TRANSITION,
                        state_path(new),
                        f"new: {_transition_words(self.new, transition)}",
                        old_node=old,
                        new_node=new,
                        new_transition=transition,
                    )
                )

    def _same_guard_and_targets(self, old: Transition, new: Transition) -> bool:
        return _same_guard(old, new) and self._targets(old) == _target_paths(new)

    def _targets(self, old: Transition) -> tuple[str, ...]:
        return tuple(self.matched.get(p, f"(removed) {p}") for p in _target_paths(old))

    def _transition_pair(self, old: Transition, new: Transition) -> None:
        where = state_path(new.source)
        trigger = _trigger_words(self.new, new)

        def add(kind: str, label: str, prefix: bool = True) -> None:
            text = f"{trigger}: {label}" if prefix else label
            self._add(
                Change(
                    CHANGED,
                    kind,
                    where,
                    text,
                    label,
                    old_node=old.source,
                    new_node=new.source,
                    old_transition=old,
                    new_transition=new,
                )
            )

        if old.delay is not None and new.delay is not None:
            before = _trigger_words(self.old, old)
            if before != trigger:
                add(TIMER, f"{before}{ARROW}{trigger}", prefix=False)
        if _guard_shape(old) != _guard_shape(new):
            add(GUARD, f"{_guard_words(old)}{ARROW}{_guard_words(new)}")
        if self._targets(old) != _target_paths(new):
            add(TARGET, f"goes to {_list(_target_paths(old))}{ARROW}{_list(_target_paths(new))}")
        names = _action_names(old.actions), _action_names(new.actions)
        if names[0] != names[1]:
            add(ACTIONS, f"then {_list(names[0])}{ARROW}{_list(names[1])}")


# -- facts about one definition ----------------------------------------------------------------

_CALL_FIELDS = (
    ("breaker", BREAKER, "circuit breaker"),
    ("transient", FAILURE, "transient failures"),
    ("external", INVOKE, "external (skipped in a dry run)"),
    ("input", INVOKE, "input"),
)


def _by_path(machine: Machine) -> dict[str, StateNode]:
    return {state_path(n): n for n in machine.definition.nodes if n.parent is not None}


def _generated(node: StateNode) -> bool:
    """A step added by a retry's expansion."""
    return is_retry_step(node)


def _written_type(node: StateNode) -> str:
    """The type as written: a retried state is compound only by the retry's expansion."""
    return "atomic" if node.retry is not None else node.type


def _kind_word(node: StateNode) -> str:
    if node.retry is not None:
        return "state"
    return {
        "compound": "state with steps inside",
        "parallel": "state with parallel parts",
        "final": "end",
        "history": "history state",
    }.get(node.type, "state")


def _name(node: StateNode) -> str:
    """A state's name as words (its description may be a sentence; the diagram shows that)."""
    return labels.sentence(labels.humanize(node.key))


def _mark(before: Any, after: Any) -> str:
    if before is None or before is False:
        return ADDED
    return REMOVED if after is None or after is False else CHANGED


def _error_workflow(machine: Machine) -> str | None:
    meta = machine.root.meta
    found = meta.get("error_workflow") if isinstance(meta, Mapping) else None
    return str(found) if found else None


def _context_changes(old: Any, new: Any) -> list[tuple[str, str]]:
    if callable(old) or callable(new):
        same = callable(old) and callable(new)
        return (
            []
            if same
            else [(CHANGED, f"initial context {_context_words(old)}{ARROW}{_context_words(new)}")]
        )
    before = thaw(old) if isinstance(old, Mapping) else {}
    after = thaw(new) if isinstance(new, Mapping) else {}
    found = []
    for key in after:
        if key not in before:
            found.append((ADDED, f"context key {key} added (starts as {json_text(after[key])})"))
        elif _canonical(before[key]) != _canonical(after[key]):
            found.append(
                (
                    CHANGED,
                    f"context key {key} starts as {json_text(before[key])}"
                    f"{ARROW}{json_text(after[key])}",
                )
            )
    found += [(REMOVED, f"context key {key} removed") for key in before if key not in after]
    return found


def _context_words(context: Any) -> str:
    return "computed from the input" if callable(context) else "given"


def _canonical(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str)


def state_config(machine: Machine, node: StateNode) -> Mapping[str, Any]:
    """The config a state was written with ({} for the steps a retry adds)."""
    config: Any = machine.config
    for key in node.path:
        states = config.get("states") if isinstance(config, Mapping) else None
        config = states.get(key) if isinstance(states, Mapping) else None
    return config if isinstance(config, Mapping) else {}


def _failure(machine: Machine, node: StateNode) -> str:
    """How a final state ends the run: "a success", "a failure" or "a failure (reason)"."""
    failure = state_config(machine, node).get("failure")
    if failure is True:
        return "a failure"
    return f"a failure ({failure})" if isinstance(failure, str) else "a success"


def _calls(machine: Machine, node: StateNode) -> dict[str, Mapping[str, Any]]:
    """The invokes written on a state, by id (or position when it has none)."""
    invokes = state_config(machine, node).get("invoke")
    items = invokes if isinstance(invokes, list) else [] if invokes is None else [invokes]
    found: dict[str, Mapping[str, Any]] = {}
    for index, item in enumerate(items):
        config = {"src": item} if not isinstance(item, Mapping) else item
        found[str(config.get("id") or f"#{index}")] = config
    return found


def _doing(config: Mapping[str, Any]) -> str:
    description = config.get("description")
    if isinstance(description, str):
        return description
    src = config.get("src")
    return labels.humanize(
        src if isinstance(src, str) else str(getattr(src, "__name__", type(src).__name__))
    )


def _final_failure(config: Mapping[str, Any]) -> str:
    """What a call's failure for good does (after any retries), as the engine decides it:
    its onError handles it, ``onFinalFailure: "skip"`` goes on along onDone, else the run
    fails."""
    if config.get("onError") is not None:
        return "onError handles it"
    if config.get("onFinalFailure") == "skip":
        return "skipped, goes on along onDone"
    return "the run fails"


def _policy(config: Mapping[str, Any]) -> RetryPolicy | None:
    retry = config.get("retry")
    try:
        return None if retry is None else as_policy(retry)
    except (TypeError, ValueError):
        return None  # the definition was validated: cannot happen for a built machine


def _field(config: Mapping[str, Any], key: str) -> Any:
    value = config.get(key)
    return thaw(value) if value is not None else None


def _migration(old: Machine, new: Machine) -> Callable[[dict[str, Any]], Any] | None:
    if old.version is None or old.version == new.version:
        return None
    return new.migrations.get(old.version)


def _probe(old: Machine, node: StateNode, migrate: Callable[[dict[str, Any]], Any]) -> str | None:
    """Where the migration puts a run of ``old`` that is in ``node``: the path of the state
    at the same depth in the migrated snapshot, or None when the migration fails on it."""
    chain = [node]
    while chain[-1].initial is not None:
        chain.append(chain[-1].initial)
    context = old.definition.context
    probe = {
        "format": FORMAT,
        "machine": old.id,
        "version": old.version,
        "fingerprint": old.fingerprint,
        "value": _value(chain[-1].path),
        "context": thaw(context) if isinstance(context, Mapping) else {},
        "status": "active",
        "output": None,
        "error": None,
        "history": {},
        "timers": [],
        "children": {},
        "retries": {},
        "retry_visits": {},
        "skipped": [],
    }
    try:
        migrated = migrate(probe)
    except Exception:  # a user's migration that cannot read this probe says nothing
        return None
    leaves = _leaves(migrated.get("value")) if isinstance(migrated, Mapping) else []
    if len(leaves) != 1:
        return None
    depth_below = len(chain) - 1
    parts = leaves[0].split(".")
    return ".".join(parts[: len(parts) - depth_below]) if depth_below < len(parts) else None


def _value(path: tuple[str, ...]) -> Any:
    """The XState state value of one leaf: "a" or {"a": {"b": "c"}}."""
    value: Any = path[-1]
    for key in reversed(path[:-1]):
        value = {key: value}
    return value


def _leaves(value: Any, prefix: str = "") -> list[str]:
    if isinstance(value, str):
        return [f"{prefix}{value}"]
    if isinstance(value, Mapping):
        return [leaf for key, inner in value.items() for leaf in _leaves(inner, f"{prefix}{key}.")]
    return []


def _user_transitions(node: StateNode) -> list[Transition]:
    """The transitions the author wrote (not the retry loop a retry policy adds)."""
    return [
        t
        for t in (*node.transitions, *node.always)
        if not is_retry_transition(t) and not is_retry_delay(t.delay) and not is_skip_transition(t)
    ]


def _trigger_key(transition: Transition) -> str:
    if transition.delay is not None:
        return "after"
    if transition.event is None:
        return "always"
    return transition.event.replace(transition.source.id, "<state>")  # done events name it


def _target_paths(transition: Transition) -> tuple[str, ...]:
    return tuple(state_path(t) for t in transition.targets)


def _guard_shape(transition: Transition) -> Any:
    def shape(guard: Any) -> Any:
        if guard is None:
            return None
        return [
            guard.type,
            _canonical(thaw(guard.params)) if not callable(guard.params) else "fn",
            [shape(c) for c in guard.children],
        ]

    return shape(transition.guard)


def _same_guard(old: Transition, new: Transition) -> bool:
    return bool(_guard_shape(old) == _guard_shape(new))


def _any(old: Transition, new: Transition) -> bool:
    return True


def _action_names(actions: Iterable[Any]) -> list[str]:
    return [a.type for a in actions if not is_added_action(a.type)]


def _list(names: Iterable[str]) -> str:
    items = list(names)
    return ", ".join(items) if items else "nothing"


def _guard_words(transition: Transition) -> str:
    return labels.guard_phrase(transition.guard) if transition.guard is not None else "no condition"


def _trigger_words(machine: Machine, transition: Transition) -> str:
    """When the transition is taken, in the diagram's words ("after 5 minutes", "if send
    invoice email fails", "payment received")."""
    if transition.delay is not None:
        return labels.delay_phrase(transition.delay, machine.implementations.delays)
    if transition.event is None:
        return "automatically"
    work = {i.id: labels.invoke_phrase(i) for n in machine.definition.nodes for i in n.invoke}
    done = labels.done_phrase(transition.event, transition.source, work)
    return done if done is not None else f"on {labels.event_phrase(transition.event)}"


def _transition_words(machine: Machine, transition: Transition) -> str:
    words = _trigger_words(machine, transition)
    if transition.guard is not None:
        words += f", {labels.guard_phrase(transition.guard)}"
    targets = _target_paths(transition)
    return f"{words}{ARROW}{_list(targets)}" if targets else f"{words} (stays)"
