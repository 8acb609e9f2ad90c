"""The machine definition: a config (XState v5 keys) validated and normalized into a
state-node tree, once, at creation.

The builder here makes the tree and its transitions; what a config names is resolved by
``references`` (states, guards, actions), invokes are read by ``invocations``, a retried
invoke is expanded by ``retrying``, and the fingerprint is ``fingerprint``'s.

Every problem is collected with its config path and reported together in one
``MachineDefinitionError``, e.g. ``states.payment.on.PAY[0].target: no state 'paid' (did you
mean 'payed'?)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .actions import ActionSpec
from .errors import (
    ImplementationError,
    MachineDefinitionError,
)
from .events import (
    after_event_type,
    done_actor_event_type,
    done_state_event_type,
    error_actor_event_type,
    snapshot_actor_event_type,
)
from .fingerprint import fingerprint, fingerprint_with
from .guards import GuardSpec
from .invocations import FAILURE_CLASSES, INVOKE_KEYS, Invocations
from .limits import MAX_DELAY, MAX_NESTING, MAX_STATE_DEPTH, shorten, too_deep
from .nodes import ATOMIC, COMPOUND, FINAL, HISTORY, PARALLEL, InvokeDef, StateNode, Transition
from .references import Implementations, References, did_you_mean, join_path
from .retrying import Expanded, delay_name, expand, final_failure, is_retry_delay, mark

__all__ = [
    "FAILURE_CLASSES",
    "INVOKE_KEYS",
    "NODE_KEYS",
    "ROOT_ONLY_KEYS",
    "STATE_TYPES",
    "TRANSITION_KEYS",
    "Definition",
    "Implementations",
    "build_definition",
    "fingerprint_with",
    "is_number_text",
    "resolve_action",
    "resolve_actor",
    "resolve_guard",
]

NODE_KEYS = frozenset(
    {
        "id",
        "initial",
        "type",
        "history",
        "target",
        "states",
        "on",
        "always",
        "after",
        "entry",
        "exit",
        "invoke",
        "onDone",
        "output",
        "tags",
        "meta",
        "description",
        "failure",
    }
)
ROOT_ONLY_KEYS = frozenset({"context", "version"})
TRANSITION_KEYS = frozenset({"target", "guard", "actions", "reenter", "description", "meta"})
STATE_TYPES = (ATOMIC, COMPOUND, PARALLEL, FINAL, HISTORY)


@dataclass(frozen=True)
class Definition:
    """A validated machine: its root node, nodes by id and in document order, and a
    fingerprint of everything that changes behaviour."""

    machine_id: str
    root: StateNode
    nodes: tuple[StateNode, ...]
    by_id: Mapping[str, StateNode]
    context: Any
    version: str | None
    fingerprint: str
    retry_delays: Mapping[str, StateNode] = field(default_factory=dict)
    """The named delays of retry waits (``retrying.delay_name``) -> the retried state."""
    legacy_fingerprint: str = ""
    """The fingerprint as computed before it covered the version, the initial context and the
    call-site keys: runs persisted then are accepted when their version label matches."""
    inline_actions: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    """User actions given as functions in the config (not by name in ``actions=``), by their
    recorded name: how a runtime finds the function of a stored effect."""


def build_definition(config: Any, impl: Implementations) -> Definition:
    """Validate ``config`` and build its state-node tree, or raise MachineDefinitionError."""
    return _Builder(impl).build(config)


class _Builder(Invocations):
    """Builds a definition: the tree of states (pass 1), then what refers to other states or
    to implementations (pass 2), on ``References`` and ``Invocations``."""

    def __init__(self, impl: Implementations) -> None:
        super().__init__(impl)
        self.configs: dict[StateNode, Mapping[str, Any]] = {}
        self.retried: dict[StateNode, Expanded] = {}

    def build(self, config: Any) -> Definition:
        if not isinstance(config, Mapping):
            raise MachineDefinitionError(
                [f"<root>: a machine config is a mapping, not {type(config).__name__}"]
            )
        deep = too_deep(config)
        if deep is not None:
            raise MachineDefinitionError(
                [f"{shorten(deep)}: the config nests deeper than {MAX_NESTING} mappings and lists"]
            )
        machine_id = config.get("id", "machine")
        if not isinstance(machine_id, str) or not machine_id:
            self.problem("id", "the machine id must be a non-empty string")
            machine_id = "machine"
        root = StateNode(machine_id, machine_id, (), None, "")
        self._create(root, config, "")
        self.by_id[machine_id] = root
        for node in self.nodes:
            node.machine_id = machine_id
            self._fill(node, self.configs[node])
        context = self._context(config)
        version = config.get("version")
        if version is not None and not isinstance(version, str):
            self.problem("version", "the version must be a string")
        if self.problems:
            raise MachineDefinitionError(self.problems, self.missing)
        retry_delays = {delay_name(n.id): n for n in self.retried}
        legacy = fingerprint(root, self.nodes)
        return Definition(
            machine_id,
            root,
            tuple(self.nodes),
            dict(self.by_id),
            context,
            version,
            fingerprint_with(legacy, self.nodes, version, context),
            retry_delays,
            legacy,
            _inline_actions(self.nodes),
        )

    # -- pass 1: the tree ------------------------------------------------------------------

    def _create(self, node: StateNode, config: Any, path: str) -> None:
        node.order = len(self.nodes)
        self.nodes.append(node)
        if not isinstance(config, Mapping):
            self.problem(path, f"a state config is a mapping, not {type(config).__name__}")
            config = {}
        self.configs[node] = config
        allowed = NODE_KEYS | ROOT_ONLY_KEYS if node.parent is None else NODE_KEYS
        for key in config:
            if key not in allowed:
                self._unknown_key(join_path(path, str(key)), str(key), allowed)
        custom_id = config.get("id")
        if node.parent is not None and custom_id is not None:
            if isinstance(custom_id, str) and custom_id:
                node.id = custom_id
            else:
                self.problem(join_path(path, "id"), "a state id must be a non-empty string")
        if node.parent is not None:
            if node.id in self.by_id:
                self.problem(join_path(path, "id"), f"duplicate state id '{node.id}'")
            self.by_id[node.id] = node
        expanded = expand(node, config, path, self.problem)
        if expanded is not None:  # a retried invoke: see statecharts.retrying
            config = expanded.config
            self.retried[node] = expanded
        self.configs[node] = config
        states = config.get("states") or {}
        if not isinstance(states, Mapping):
            self.problem(join_path(path, "states"), "'states' must be a mapping of name -> state")
            states = {}
        node.type = self._type(config, bool(states), path)
        if node.parent is None and node.type in (FINAL, HISTORY):
            self.problem("type", f"the root is a compound or parallel state, not {node.type}")
            node.type = COMPOUND if states else ATOMIC
        if states and len(node.path) >= MAX_STATE_DEPTH:
            self.problem(join_path(path, "states"), f"states nest at most {MAX_STATE_DEPTH} deep")
            states = {}
        children = []
        for key, child_config in states.items():
            child_path = join_path(path, f"states.{key}")
            if not isinstance(key, str) or not key or "." in key or key.startswith("#"):
                self.problem(child_path, "a state name must be non-empty, without '.' or '#'")
                continue
            child_id = ".".join((self.nodes[0].key, *node.path, key))  # XState: machine id + path
            child = StateNode(key, child_id, (*node.path, key), node, child_path)
            self._create(child, child_config, child_path)
            children.append(child)
        node.children = tuple(children)
        node.regions = tuple(c for c in children if c.type != HISTORY)
        node.history_children = tuple(c for c in children if c.type == HISTORY)

    def _type(self, config: Mapping[str, Any], has_children: bool, path: str) -> str:
        kind = config.get("type")
        if kind is None:
            return COMPOUND if has_children else ATOMIC
        if kind not in STATE_TYPES:
            self.problem(
                join_path(path, "type"),
                f"unknown state type {kind!r} (one of {', '.join(STATE_TYPES)})",
            )
            return COMPOUND if has_children else ATOMIC
        if kind in (ATOMIC, FINAL, HISTORY) and has_children:
            self.problem(join_path(path, "states"), f"a {kind} state cannot have child states")
        if kind == COMPOUND and not has_children:
            self.problem(join_path(path, "states"), "a compound state needs child states")
            return ATOMIC
        return STATE_TYPES[STATE_TYPES.index(kind)]  # the module's constant, not the config's

    # -- pass 2: everything that refers to other nodes or implementations -------------------

    def _fill(self, node: StateNode, config: Mapping[str, Any]) -> None:
        path = node.config_path
        mark(node, self.retried)
        self._initial(node, config, path)
        if node.type == HISTORY:
            self._history(node, config, path)
        elif "history" in config or "target" in config:
            for key in ("history", "target"):
                if key in config:
                    self.problem(join_path(path, key), f"'{key}' is only for history states")
        node.entry = self._actions(config.get("entry"), join_path(path, "entry"))
        node.exit = self._actions(config.get("exit"), join_path(path, "exit"))
        node.tags = self._tags(config.get("tags"), join_path(path, "tags"))
        node.meta = config.get("meta")
        node.description = self._description(
            config.get("description"), join_path(path, "description")
        )
        node.failure = self._failure(node, config.get("failure"), join_path(path, "failure"))
        node.output = config.get("output")
        if node.output is not None and node.type != FINAL and node.parent is not None:
            self.problem(join_path(path, "output"), "'output' belongs on final states or the root")
        if node.output is not None and not callable(node.output):
            node.output = self._json_value(node.output, join_path(path, "output"))
        transitions: list[Transition] = []
        on = config.get("on") or {}
        if not isinstance(on, Mapping):
            self.problem(join_path(path, "on"), "'on' must be a mapping of event -> transition")
            on = {}
        for descriptor, value in on.items():
            self._check_descriptor(descriptor, join_path(path, f"on.{descriptor}"))
            transitions += self._transitions(
                node, value, join_path(path, f"on.{descriptor}"), str(descriptor)
            )
        if "onDone" in config:
            if node.type not in (COMPOUND, PARALLEL):
                self.problem(
                    join_path(path, "onDone"),
                    "'onDone' needs a compound or parallel "
                    "state (it fires when a final child is reached)",
                )
            transitions += self._transitions(
                node, config["onDone"], join_path(path, "onDone"), done_state_event_type(node.id)
            )
        node.invoke = self._invokes(
            node, config.get("invoke"), join_path(path, "invoke"), transitions
        )
        transitions += self._after(node, config.get("after"), join_path(path, "after"))
        node.always = (
            tuple(self._transitions(node, config.get("always"), join_path(path, "always"), None))
            if config.get("always") is not None
            else ()
        )
        node.transitions = tuple(transitions)
        for order, transition in enumerate((*node.transitions, *node.always)):
            transition.order = order
        node.index_transitions()

    def _initial(self, node: StateNode, config: Mapping[str, Any], path: str) -> None:
        initial = config.get("initial")
        if node.type == COMPOUND:
            if initial is None:
                self.problem(
                    join_path(path, "initial"),
                    "a compound state needs 'initial' "
                    f"(one of {', '.join(c.key for c in node.children)})",
                )
                return
            child = next((c for c in node.children if c.key == initial), None)
            if child is None:
                self.problem(
                    join_path(path, "initial"),
                    f"no child state {initial!r}{did_you_mean(initial, node.children)}",
                )
            node.initial = child
        elif initial is not None:
            self.problem(join_path(path, "initial"), f"a {node.type} state has no 'initial'")

    def _history(self, node: StateNode, config: Mapping[str, Any], path: str) -> None:
        kind = config.get("history", "shallow")
        if kind not in ("shallow", "deep"):
            self.problem(
                join_path(path, "history"), f"history is 'shallow' or 'deep', not {kind!r}"
            )
            kind = "shallow"
        node.history = kind
        assert node.parent is not None
        if node.parent.parent is None and node.parent.type == ATOMIC:
            self.problem(path, "a history state needs a compound or parallel parent")
        target = config.get("target")
        if target is not None:
            targets = target if isinstance(target, list) else [target]
            resolved = [
                self._target(node.parent, t, join_path(path, "target"), base=node.parent)
                for t in targets
            ]
            node.history_default = tuple(t for t in resolved if t is not None)

    def _transitions(
        self, source: StateNode, value: Any, path: str, event: str | None
    ) -> list[Transition]:
        items = value if isinstance(value, list) else [value]
        result = []
        for i, item in enumerate(items):
            item_path = f"{path}[{i}]"
            if item is None or isinstance(item, str):
                item = {} if item is None else {"target": item}
            if not isinstance(item, Mapping):
                self.problem(
                    item_path,
                    "a transition is a target string or a mapping with "
                    "'target', 'guard', 'actions'",
                )
                continue
            for key in item:
                if key == "cond":
                    self.problem(
                        join_path(item_path, "cond"), "'cond' was renamed 'guard' in XState v5"
                    )
                elif key not in TRANSITION_KEYS:
                    self._unknown_key(join_path(item_path, str(key)), str(key), TRANSITION_KEYS)
            targets = self._targets(source, item.get("target"), join_path(item_path, "target"))
            guard = (
                self._guard(item.get("guard"), join_path(item_path, "guard"))
                if item.get("guard") is not None
                else None
            )
            reenter = item.get("reenter", False)
            if not isinstance(reenter, bool):
                self.problem(join_path(item_path, "reenter"), "'reenter' must be true or false")
                reenter = False
            result.append(
                Transition(
                    source,
                    event,
                    targets,
                    guard,
                    self._actions(item.get("actions"), join_path(item_path, "actions")),
                    reenter,
                    description=self._description(
                        item.get("description"), join_path(item_path, "description")
                    ),
                    meta=item.get("meta"),
                    config_path=item_path,
                )
            )
        return result

    def _invokes(
        self, node: StateNode, value: Any, path: str, transitions: list[Transition]
    ) -> tuple[InvokeDef, ...]:
        if value is None:
            return ()
        items = value if isinstance(value, list) else [value]
        invokes = []
        for i, item in enumerate(items):
            item_path = f"{path}[{i}]" if isinstance(value, list) else path
            if isinstance(item, str):
                item = {"src": item}
            if not isinstance(item, Mapping):
                self.problem(item_path, "an invoke is a mapping with 'src'")
                continue
            for key in item:
                if key not in INVOKE_KEYS:
                    self._unknown_key(join_path(item_path, str(key)), str(key), INVOKE_KEYS)
            invoke = self._invoke(node, item, item_path, i)
            if invoke is None:
                continue
            invokes.append(invoke)
            if "onDone" in item:
                transitions += self._transitions(
                    node,
                    item["onDone"],
                    join_path(item_path, "onDone"),
                    done_actor_event_type(invoke.id),
                )
            if "onError" in item:
                transitions += self._transitions(
                    node,
                    item["onError"],
                    join_path(item_path, "onError"),
                    error_actor_event_type(invoke.id),
                )
            elif item.get("onFinalFailure") == "skip":  # a call without retry fails for good
                transitions += self._transitions(
                    node,
                    final_failure(node, item, item_path, self.problem, invoke.id),
                    join_path(item_path, "onFinalFailure"),
                    error_actor_event_type(invoke.id),
                )
            if "onSnapshot" in item:
                transitions += self._transitions(
                    node,
                    item["onSnapshot"],
                    join_path(item_path, "onSnapshot"),
                    snapshot_actor_event_type(invoke.id),
                )
        return tuple(invokes)

    def _failure(self, node: StateNode, value: Any, path: str) -> str | None:
        """``failure`` on a final state: true (the reason is the state id) or the reason."""
        if value is None or value is False:
            return None
        if node.type != FINAL:
            self.problem(path, "'failure' belongs on final states")
            return None
        if value is True:
            return node.id
        if isinstance(value, str) and value:
            return value
        self.problem(path, "'failure' is true or the failure's reason (a non-empty string)")
        return None

    def _after(self, node: StateNode, value: Any, path: str) -> list[Transition]:
        if value is None:
            return []
        if not isinstance(value, Mapping):
            self.problem(
                path, "'after' must be a mapping of delay (ms or a delay name) -> transition"
            )
            return []
        transitions: list[Transition] = []
        timers: list[tuple[str, int | str]] = []
        for key, target in value.items():
            delay = self._delay_key(key, join_path(path, str(key)))
            if delay is None:
                continue
            event = after_event_type(delay, node.id)
            timers.append((event, delay))
            for transition in self._transitions(node, target, join_path(path, str(key)), event):
                transition.delay = delay
                transitions.append(transition)
        node.after_timers = tuple(timers)
        return transitions

    def _delay_key(self, key: Any, path: str) -> int | str | None:
        if isinstance(key, int | float) and not isinstance(key, bool):
            number: float = key
        elif isinstance(key, str) and is_number_text(key):
            number = float(key)
        elif isinstance(key, str):
            if is_retry_delay(key):
                return key
            if key not in self.impl.delays:
                self.no_implementation(
                    "delay",
                    key,
                    path,
                    self.impl.delays,
                    " (a delay is milliseconds or a name from delays=)",
                )
                return None
            return key
        else:
            self.problem(path, f"a delay is milliseconds or a delay name, not {key!r}")
            return None
        if not math.isfinite(number) or number < 0:
            self.problem(path, f"a delay must be a non-negative number of ms, not {key!r}")
            return None
        if number > MAX_DELAY:
            self.problem(path, f"a delay is at most {MAX_DELAY} ms, not {key!r}")
            return None
        return int(number)

    def _tags(self, value: Any, path: str) -> frozenset[str]:
        if value is None:
            return frozenset()
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list | tuple) or not all(isinstance(t, str) for t in items):
            self.problem(path, "tags are a string or a list of strings")
            return frozenset()
        return frozenset(items)

    def _context(self, config: Mapping[str, Any]) -> Any:
        context = config.get("context")
        if context is None or callable(context):
            return context
        if not isinstance(context, Mapping):
            self.problem("context", "context is a mapping (or a function of input)")
            return None
        return self._json_value(context, "context")

    def _check_descriptor(self, descriptor: Any, path: str) -> None:
        if not isinstance(descriptor, str) or not descriptor:
            self.problem(path, "an event descriptor is a non-empty string")
        elif "*" in descriptor[:-1] or (
            descriptor.endswith("*") and descriptor not in ("*",) and not descriptor.endswith(".*")
        ):
            self.problem(path, "a wildcard is '*' or the last token ('prefix.*')")


def _inline_actions(nodes: Iterable[StateNode]) -> dict[str, Callable[..., Any]]:
    """Functions given inline as user actions, by name (the first in document order wins)."""
    found: dict[str, Callable[..., Any]] = {}
    for node in nodes:
        transitions = (*node.transitions, *node.always)
        for spec in (*node.entry, *node.exit, *(a for t in transitions for a in t.actions)):
            if callable(spec.impl) and not spec.is_builtin:
                found.setdefault(spec.type, spec.impl)
    return found


def is_number_text(text: str) -> bool:
    """True for a key written as a number (an `after` key in milliseconds, not a delay name)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _runtime_builder(definition: Definition, impl: Implementations) -> References:
    builder = References(impl)
    builder.nodes = list(definition.nodes)
    builder.by_id = dict(definition.by_id)
    return builder


def resolve_guard(definition: Definition, impl: Implementations, guard: Any) -> GuardSpec:
    """Resolve a guard given at run time, or raise MachineDefinitionError."""
    builder = _runtime_builder(definition, impl)
    spec = builder._guard(guard, "check")
    if builder.problems or spec is None:
        raise MachineDefinitionError(builder.problems or ["check: not a guard"])
    return spec


def resolve_action(definition: Definition, impl: Implementations, action: Any) -> ActionSpec:
    """Resolve an action given at run time, or raise MachineDefinitionError."""
    builder = _runtime_builder(definition, impl)
    spec = builder._action(action, "enqueue")
    if builder.problems or spec is None:
        raise MachineDefinitionError(builder.problems or ["enqueue: not an action"])
    return spec


def resolve_actor(impl: Implementations, src: Any) -> tuple[str, Any]:
    """(name, logic) for a ``src``: a name from ``actors=`` or actor logic itself."""
    if isinstance(src, str):
        logic = impl.actors.get(src)
        if logic is None:
            raise ImplementationError(
                f"actor {src!r}",
                LookupError(
                    f"no actor named {src!r} in actors= (known: "
                    f"{', '.join(sorted(impl.actors)) or 'none'})"
                ),
            )
        return src, logic
    return str(getattr(src, "name", None) or getattr(src, "__name__", "actor")), src
