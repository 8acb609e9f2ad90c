"""The machine definition: a config (XState v5 keys) validated and normalized into a
state-node tree, once, at creation.

Every problem is collected with its config path and reported together in one
``MachineDefinitionError``, e.g. ``states.payment.on.PAY[0].target: no state 'paid' (did you
mean 'payed'?)``.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from .actions import ActionSpec, BuiltinAction
from .errors import (
    ContextError,
    ImplementationError,
    MachineDefinitionError,
    MissingImplementation,
)
from .events import (
    after_event_type,
    done_actor_event_type,
    done_state_event_type,
    error_actor_event_type,
    snapshot_actor_event_type,
)
from .frozen import freeze
from .guards import GuardSpec
from .idempotency import KEY_LENGTH, MAX_KEY_LENGTH, MIN_KEY_LENGTH
from .limits import MAX_DELAY, MAX_NESTING, MAX_STATE_DEPTH, shorten, too_deep
from .logic import is_external
from .nodes import ATOMIC, COMPOUND, FINAL, HISTORY, PARALLEL, InvokeDef, StateNode, Transition
from .retrying import Expanded, delay_name, expand, final_failure, is_retry_delay, mark

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
INVOKE_KEYS = frozenset(
    {
        "id",
        "src",
        "input",
        "onDone",
        "onError",
        "onSnapshot",
        "systemId",
        "retry",
        "onFinalFailure",
        "breaker",
        "limit",
        "external",
        "transient",
        "timeout",
        "heartbeatTimeout",
        "keyLength",
        "description",
        "meta",
    }
)
STATE_TYPES = (ATOMIC, COMPOUND, PARALLEL, FINAL, HISTORY)
FAILURE_CLASSES = ("fail_run", "skip")


@dataclass(frozen=True)
class Implementations:
    """The named guards, actions, actors and delays a config refers to."""

    guards: Mapping[str, Callable[..., Any] | GuardSpec] = field(default_factory=dict)
    actions: Mapping[str, Callable[..., Any] | BuiltinAction] = field(default_factory=dict)
    actors: Mapping[str, Any] = field(default_factory=dict)
    delays: Mapping[str, int | float | Callable[..., Any]] = field(default_factory=dict)

    def merged(self, other: Implementations) -> Implementations:
        """These implementations with ``other``'s added (``other`` wins on a name clash)."""
        return Implementations(
            {**self.guards, **other.guards},
            {**self.actions, **other.actions},
            {**self.actors, **other.actors},
            {**self.delays, **other.delays},
        )


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


class _Builder:
    def __init__(self, impl: Implementations) -> None:
        self.impl = impl
        self.problems: list[str] = []
        self.missing: list[MissingImplementation] = []
        self.nodes: list[StateNode] = []
        self.configs: dict[StateNode, Mapping[str, Any]] = {}
        self.by_id: dict[str, StateNode] = {}
        self.retried: dict[StateNode, Expanded] = {}

    def problem(self, path: str, message: str) -> None:
        self.problems.append(f"{path or '<root>'}: {message}")

    def no_implementation(
        self, kind: str, name: str, path: str, known: Iterable[Any], note: str = ""
    ) -> None:
        """A named guard/action/actor/delay the implementations lack (``validate`` reports
        these as what the file expects the code to provide)."""
        self.missing.append(MissingImplementation(kind, name, path))
        self.problem(path, f"no {kind} '{name}'{_hint(name, known)}{note}")

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
        legacy = _fingerprint(root, self.nodes)
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
                self._unknown_key(_join(path, str(key)), str(key), allowed)
        custom_id = config.get("id")
        if node.parent is not None and custom_id is not None:
            if isinstance(custom_id, str) and custom_id:
                node.id = custom_id
            else:
                self.problem(_join(path, "id"), "a state id must be a non-empty string")
        if node.parent is not None:
            if node.id in self.by_id:
                self.problem(_join(path, "id"), f"duplicate state id '{node.id}'")
            self.by_id[node.id] = node
        expanded = expand(node, config, path, self.problem)
        if expanded is not None:  # a retried invoke: see statecharts.retrying
            config = expanded.config
            self.retried[node] = expanded
        self.configs[node] = config
        states = config.get("states") or {}
        if not isinstance(states, Mapping):
            self.problem(_join(path, "states"), "'states' must be a mapping of name -> state")
            states = {}
        node.type = self._type(config, bool(states), path)
        if node.parent is None and node.type in (FINAL, HISTORY):
            self.problem("type", f"the root is a compound or parallel state, not {node.type}")
            node.type = COMPOUND if states else ATOMIC
        if states and len(node.path) >= MAX_STATE_DEPTH:
            self.problem(_join(path, "states"), f"states nest at most {MAX_STATE_DEPTH} deep")
            states = {}
        children = []
        for key, child_config in states.items():
            child_path = _join(path, f"states.{key}")
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
                _join(path, "type"),
                f"unknown state type {kind!r} (one of {', '.join(STATE_TYPES)})",
            )
            return COMPOUND if has_children else ATOMIC
        if kind in (ATOMIC, FINAL, HISTORY) and has_children:
            self.problem(_join(path, "states"), f"a {kind} state cannot have child states")
        if kind == COMPOUND and not has_children:
            self.problem(_join(path, "states"), "a compound state needs child states")
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
                    self.problem(_join(path, key), f"'{key}' is only for history states")
        node.entry = self._actions(config.get("entry"), _join(path, "entry"))
        node.exit = self._actions(config.get("exit"), _join(path, "exit"))
        node.tags = self._tags(config.get("tags"), _join(path, "tags"))
        node.meta = config.get("meta")
        node.description = self._description(config.get("description"), _join(path, "description"))
        node.failure = self._failure(node, config.get("failure"), _join(path, "failure"))
        node.output = config.get("output")
        if node.output is not None and node.type != FINAL and node.parent is not None:
            self.problem(_join(path, "output"), "'output' belongs on final states or the root")
        if node.output is not None and not callable(node.output):
            node.output = self._json_value(node.output, _join(path, "output"))
        transitions: list[Transition] = []
        on = config.get("on") or {}
        if not isinstance(on, Mapping):
            self.problem(_join(path, "on"), "'on' must be a mapping of event -> transition")
            on = {}
        for descriptor, value in on.items():
            self._check_descriptor(descriptor, _join(path, f"on.{descriptor}"))
            transitions += self._transitions(
                node, value, _join(path, f"on.{descriptor}"), str(descriptor)
            )
        if "onDone" in config:
            if node.type not in (COMPOUND, PARALLEL):
                self.problem(
                    _join(path, "onDone"),
                    "'onDone' needs a compound or parallel "
                    "state (it fires when a final child is reached)",
                )
            transitions += self._transitions(
                node, config["onDone"], _join(path, "onDone"), done_state_event_type(node.id)
            )
        node.invoke = self._invokes(node, config.get("invoke"), _join(path, "invoke"), transitions)
        transitions += self._after(node, config.get("after"), _join(path, "after"))
        node.always = (
            tuple(self._transitions(node, config.get("always"), _join(path, "always"), None))
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
                    _join(path, "initial"),
                    "a compound state needs 'initial' "
                    f"(one of {', '.join(c.key for c in node.children)})",
                )
                return
            child = next((c for c in node.children if c.key == initial), None)
            if child is None:
                self.problem(
                    _join(path, "initial"),
                    f"no child state {initial!r}{_hint(initial, node.children)}",
                )
            node.initial = child
        elif initial is not None:
            self.problem(_join(path, "initial"), f"a {node.type} state has no 'initial'")

    def _history(self, node: StateNode, config: Mapping[str, Any], path: str) -> None:
        kind = config.get("history", "shallow")
        if kind not in ("shallow", "deep"):
            self.problem(_join(path, "history"), f"history is 'shallow' or 'deep', not {kind!r}")
            kind = "shallow"
        node.history = kind
        assert node.parent is not None
        if node.parent.parent is None and node.parent.type == ATOMIC:
            self.problem(path, "a history state needs a compound or parallel parent")
        target = config.get("target")
        if target is not None:
            targets = target if isinstance(target, list) else [target]
            resolved = [
                self._target(node.parent, t, _join(path, "target"), base=node.parent)
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
                        _join(item_path, "cond"), "'cond' was renamed 'guard' in XState v5"
                    )
                elif key not in TRANSITION_KEYS:
                    self._unknown_key(_join(item_path, str(key)), str(key), TRANSITION_KEYS)
            targets = self._targets(source, item.get("target"), _join(item_path, "target"))
            guard = (
                self._guard(item.get("guard"), _join(item_path, "guard"))
                if item.get("guard") is not None
                else None
            )
            reenter = item.get("reenter", False)
            if not isinstance(reenter, bool):
                self.problem(_join(item_path, "reenter"), "'reenter' must be true or false")
                reenter = False
            result.append(
                Transition(
                    source,
                    event,
                    targets,
                    guard,
                    self._actions(item.get("actions"), _join(item_path, "actions")),
                    reenter,
                    description=self._description(
                        item.get("description"), _join(item_path, "description")
                    ),
                    meta=item.get("meta"),
                    config_path=item_path,
                )
            )
        return result

    def _targets(self, source: StateNode, value: Any, path: str) -> tuple[StateNode, ...]:
        if value is None:
            return ()
        values = value if isinstance(value, list) else [value]
        found = []
        for i, target in enumerate(values):
            node = self._target(source, target, path if len(values) == 1 else f"{path}[{i}]")
            if node is not None:
                found.append(node)
        return tuple(found)

    def _target(
        self, source: StateNode, target: Any, path: str, base: StateNode | None = None
    ) -> StateNode | None:
        if not isinstance(target, str) or not target:
            self.problem(path, f"a target is a state name, '.child' or '#id', not {target!r}")
            return None
        if target.startswith("#"):
            return self._by_reference(target[1:], path)
        if base is None:
            if target.startswith("."):
                base, target = source, target[1:]
            elif source.parent is None:
                self.problem(
                    path, f"'{target}' is not a target from the root; did you mean '.{target}'?"
                )
                return None
            else:
                base = source.parent
        return self._by_path(base, target.split("."), path)

    def _by_reference(self, reference: str, path: str) -> StateNode | None:
        if reference in self.by_id:
            return self.by_id[reference]
        head, _, rest = reference.partition(".")
        if head in self.by_id and rest:
            return self._by_path(self.by_id[head], rest.split("."), path)
        self.problem(path, f"no state with id '{reference}'{_hint(reference, self.by_id)}")
        return None

    def _by_path(self, base: StateNode, keys: list[str], path: str) -> StateNode | None:
        node = base
        for key in keys:
            child = next((c for c in node.children if c.key == key), None)
            if child is None:
                self.problem(
                    path,
                    f"no state '{key}'"
                    f"{' in ' + repr(node.id) if node is not base else ''}"
                    f"{_hint(key, node.children)}",
                )
                return None
            node = child
        return node

    def _guard(self, value: Any, path: str) -> GuardSpec | None:
        spec = self._resolve_guard(value, path)
        description = getattr(value, "description", None)
        if spec is not None and description and spec.description != description:
            return dataclasses.replace(spec, description=description)
        return spec

    def _resolve_guard(self, value: Any, path: str) -> GuardSpec | None:
        if isinstance(value, GuardSpec):
            if value.type in ("and", "or", "not"):
                children = [
                    self._guard(child, f"{path}.{value.type}[{i}]")
                    for i, child in enumerate(value.children)
                ]
                return GuardSpec(value.type, children=tuple(c for c in children if c))
            if value.type == "stateIn":
                node = self._state_in(value.params, path)
                return GuardSpec("stateIn", params=node.id if node else None)
            if type(value) is not GuardSpec:
                return value  # the engine's own, resolved already (retrying.RetryAllowed)
            return self._named_guard(value.type, value.params, path)
        if isinstance(value, str):
            return self._named_guard(value, None, path)
        if isinstance(value, Mapping):
            kind = value.get("type")
            extra = set(value) - {"type", "params"}
            if extra:
                self.problem(path, f"unknown guard keys {sorted(extra)} (use 'type', 'params')")
            if not isinstance(kind, str):
                self.problem(_join(path, "type"), "a guard mapping needs a string 'type'")
                return None
            return self._named_guard(kind, value.get("params"), path)
        if callable(value):
            return GuardSpec(_name_of(value), fn=value)
        self.problem(
            path,
            f"a guard is a name, {{'type', 'params'}} or a callable, not {type(value).__name__}",
        )
        return None

    def _named_guard(self, name: str, params: Any, path: str) -> GuardSpec | None:
        impl = self.impl.guards.get(name)
        if impl is None:
            self.no_implementation("guard", name, path, self.impl.guards)
            return None
        params = self._params(params, _join(path, "params"))
        if isinstance(impl, GuardSpec):
            return self._guard(impl, path)
        if not callable(impl):
            self.problem(path, f"guard '{name}' is not callable")
            return None
        said = getattr(impl, "description", None)  # see guards.described
        return GuardSpec(
            name, params=params, fn=impl, description=said if isinstance(said, str) else None
        )

    def _state_in(self, reference: Any, path: str) -> StateNode | None:
        if not isinstance(reference, str):
            self.problem(path, "state_in takes '#id' or a dotted path from the root")
            return None
        if reference.startswith("#"):
            return self._by_reference(reference[1:], path)
        return self._by_path(self.nodes[0], reference.split("."), path)

    def _params(self, params: Any, path: str) -> Any:
        if params is None or callable(params):
            return params
        if not isinstance(params, Mapping):
            self.problem(path, "params must be a mapping (or a function of context, event)")
            return None
        return self._json_value(params, path)

    def _actions(self, value: Any, path: str) -> tuple[ActionSpec, ...]:
        if value is None:
            return ()
        items = value if isinstance(value, list | tuple) else [value]
        specs = []
        for i, item in enumerate(items):
            spec = self._action(item, f"{path}[{i}]")
            if spec is not None:
                specs.append(spec)
        return tuple(specs)

    def _action(self, value: Any, path: str) -> ActionSpec | None:
        if isinstance(value, BuiltinAction):
            return ActionSpec(value.type, None, value)
        if isinstance(value, str):
            return self._named_action(value, None, path)
        if isinstance(value, Mapping):
            kind = value.get("type")
            extra = set(value) - {"type", "params"}
            if extra:
                self.problem(path, f"unknown action keys {sorted(extra)} (use 'type', 'params')")
            if not isinstance(kind, str):
                self.problem(_join(path, "type"), "an action mapping needs a string 'type'")
                return None
            return self._named_action(kind, value.get("params"), path)
        if callable(value):
            return ActionSpec(_name_of(value), None, value)
        self.problem(
            path,
            f"an action is a name, {{'type', 'params'}}, a built-in or a "
            f"callable, not {type(value).__name__}",
        )
        return None

    def _named_action(self, name: str, params: Any, path: str) -> ActionSpec | None:
        impl = self.impl.actions.get(name)
        if impl is None:
            self.no_implementation("action", name, path, self.impl.actions)
            return None
        if not (isinstance(impl, BuiltinAction) or callable(impl)):
            self.problem(path, f"action '{name}' is neither callable nor a built-in action")
            return None
        return ActionSpec(name, self._params(params, _join(path, "params")), impl)

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
                    self._unknown_key(_join(item_path, str(key)), str(key), INVOKE_KEYS)
            invoke = self._invoke(node, item, item_path, i)
            if invoke is None:
                continue
            invokes.append(invoke)
            if "onDone" in item:
                transitions += self._transitions(
                    node,
                    item["onDone"],
                    _join(item_path, "onDone"),
                    done_actor_event_type(invoke.id),
                )
            if "onError" in item:
                transitions += self._transitions(
                    node,
                    item["onError"],
                    _join(item_path, "onError"),
                    error_actor_event_type(invoke.id),
                )
            elif item.get("onFinalFailure") == "skip":  # a call without retry fails for good
                transitions += self._transitions(
                    node,
                    final_failure(node, item, item_path, self.problem, invoke.id),
                    _join(item_path, "onFinalFailure"),
                    error_actor_event_type(invoke.id),
                )
            if "onSnapshot" in item:
                transitions += self._transitions(
                    node,
                    item["onSnapshot"],
                    _join(item_path, "onSnapshot"),
                    snapshot_actor_event_type(invoke.id),
                )
        return tuple(invokes)

    def _invoke(
        self, node: StateNode, item: Mapping[str, Any], path: str, index: int
    ) -> InvokeDef | None:
        src = item.get("src")
        logic: Any = None
        if isinstance(src, str):
            logic = self.impl.actors.get(src)
            if logic is None:
                self.no_implementation("actor", src, _join(path, "src"), self.impl.actors)
        elif src is not None and not isinstance(src, Mapping):
            logic, src = src, _name_of(src)
        else:
            self.problem(_join(path, "src"), "an invoke needs 'src' naming an actor")
            return None
        actor_id = item.get("id") or f"{node.id}:invocation[{index}]"
        if not isinstance(actor_id, str):
            self.problem(_join(path, "id"), "an invoke id must be a string")
            actor_id = f"{node.id}:invocation[{index}]"
        failure = item.get("onFinalFailure")
        if failure is not None and failure not in FAILURE_CLASSES:
            self.problem(
                _join(path, "onFinalFailure"),
                f"one of {', '.join(FAILURE_CLASSES)}, not {failure!r}",
            )
        retry = node.retry_attempt_of.retry if node.retry_attempt_of is not None else None
        input_value = item.get("input")
        if input_value is not None and not callable(input_value):
            input_value = self._params({"input": input_value}, _join(path, "input"))
            input_value = input_value["input"] if input_value is not None else None
        description = self._description(item.get("description"), _join(path, "description"))
        external = item.get("external", False)
        if not isinstance(external, bool):
            self.problem(_join(path, "external"), "'external' is true or false")
            external = False
        breaker = item.get("breaker")
        if breaker is not None and not isinstance(breaker, str):
            self.problem(_join(path, "breaker"), "'breaker' names a downstream (a string)")
            breaker = None
        limit = item.get("limit")
        if limit is not None and not (isinstance(limit, str) and limit.strip()):
            self.problem(
                _join(path, "limit"),
                "'limit' names a shared limit (a non-empty string, e.g. \"crm\")",
            )
            limit = None
        return InvokeDef(
            actor_id,
            str(src),
            input_value,
            item.get("systemId"),
            retry,
            failure,
            path,
            logic,
            description,
            breaker,
            external or is_external(logic),
            self._transient(item.get("transient", False), _join(path, "transient")),
            limit,
            self._ms(item.get("timeout"), _join(path, "timeout")),
            self._ms(item.get("heartbeatTimeout"), _join(path, "heartbeatTimeout")),
            self._key_length(item.get("keyLength"), _join(path, "keyLength")),
        )

    def _ms(self, value: Any, path: str) -> int | None:
        """A call's ``timeout`` / ``heartbeatTimeout``: whole milliseconds, positive."""
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 2**31:
            return value
        self.problem(path, f"milliseconds, a whole number from 1 to {2**31}, not {value!r}")
        return None

    def _key_length(self, value: Any, path: str) -> int:
        """``keyLength``: how many characters the call's idempotency key has."""
        if value is None:
            return KEY_LENGTH
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and MIN_KEY_LENGTH <= value <= MAX_KEY_LENGTH
        ):
            return value
        self.problem(
            path,
            f"'keyLength' is a whole number from {MIN_KEY_LENGTH} to "
            f"{MAX_KEY_LENGTH} (the idempotency key's characters), not {value!r}",
        )
        return KEY_LENGTH

    def _transient(self, value: Any, path: str) -> bool | tuple[str, ...]:
        """``transient``: true (every error) or a list of error class names."""
        if isinstance(value, bool):
            return value
        if (
            isinstance(value, list | tuple)
            and value
            and all(isinstance(n, str) and n for n in value)
        ):
            return tuple(value)
        self.problem(
            path,
            "'transient' is true, false or a non-empty list of error class "
            'names (e.g. ["DatabaseError"])',
        )
        return False

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
            delay = self._delay_key(key, _join(path, str(key)))
            if delay is None:
                continue
            event = after_event_type(delay, node.id)
            timers.append((event, delay))
            for transition in self._transitions(node, target, _join(path, str(key)), event):
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

    def _description(self, value: Any, path: str) -> str | None:
        if value is not None and not isinstance(value, str):
            self.problem(path, "a description is a string")
            return None
        return value

    def _context(self, config: Mapping[str, Any]) -> Any:
        context = config.get("context")
        if context is None or callable(context):
            return context
        if not isinstance(context, Mapping):
            self.problem("context", "context is a mapping (or a function of input)")
            return None
        return self._json_value(context, "context")

    def _json_value(self, value: Any, path: str) -> Any:
        """``value`` frozen, if it is JSON that persists (orjson refuses integers beyond 64
        bits); else a problem naming the path."""
        try:
            frozen = freeze(value, path)
            orjson.dumps(frozen)
        except ContextError as exc:  # names the path inside the value (64-bit ints too)
            self.problem(path, str(exc))
            return None
        except orjson.JSONEncodeError as exc:
            self.problem(path, f"not a JSON value that persists ({exc})")
            return None
        return frozen

    def _check_descriptor(self, descriptor: Any, path: str) -> None:
        if not isinstance(descriptor, str) or not descriptor:
            self.problem(path, "an event descriptor is a non-empty string")
        elif "*" in descriptor[:-1] or (
            descriptor.endswith("*") and descriptor not in ("*",) and not descriptor.endswith(".*")
        ):
            self.problem(path, "a wildcard is '*' or the last token ('prefix.*')")

    def _unknown_key(self, path: str, key: str, allowed: Iterable[str]) -> None:
        self.problem(path, f"unknown key '{key}'{_hint(key, allowed)}")


def _inline_actions(nodes: Iterable[StateNode]) -> dict[str, Callable[..., Any]]:
    """Functions given inline as user actions, by name (the first in document order wins)."""
    found: dict[str, Callable[..., Any]] = {}
    for node in nodes:
        transitions = (*node.transitions, *node.always)
        for spec in (*node.entry, *node.exit, *(a for t in transitions for a in t.actions)):
            if callable(spec.impl) and not spec.is_builtin:
                found.setdefault(spec.type, spec.impl)
    return found


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _hint(word: Any, options: Iterable[Any]) -> str:
    names = [getattr(o, "key", o) for o in options]
    close = difflib.get_close_matches(str(word), [str(n) for n in names], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def is_number_text(text: str) -> bool:
    """True for a key written as a number (an `after` key in milliseconds, not a delay name)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _name_of(fn: Any) -> str:
    return str(getattr(fn, "name", None) or getattr(fn, "__name__", None) or type(fn).__name__)


def _fingerprint(root: StateNode, nodes: list[StateNode]) -> str:
    """sha256 of the behaviour-relevant shape (descriptions and meta excluded)."""
    shape = [_node_shape(node) for node in nodes]
    digest = hashlib.sha256(
        orjson.dumps(shape, default=_shape_default, option=orjson.OPT_SORT_KEYS)
    )
    return digest.hexdigest()[:32]


def fingerprint_with(
    legacy: str, nodes: Iterable[StateNode], version: str | None, context: Any
) -> str:
    """The fingerprint: the node shapes' hash (`legacy`) with the version label, the initial
    context and the keys that change what a durable run does (failure finals, and per call
    site its input, transient classes, breaker and external flag)."""
    extra = {
        "version": version,
        "context": _shape_default(context),
        "failure": {n.id: n.failure for n in nodes if n.failure is not None},
        "invoke": {
            n.id: [
                [
                    _shape_default(i.input),
                    _shape_default(i.transient),
                    i.breaker,
                    i.external,
                    *_key_shape(i),
                ]
                for i in n.invoke
            ]
            for n in nodes
            if n.invoke
        },
    }
    digest = hashlib.sha256(
        orjson.dumps([legacy, extra], default=_shape_default, option=orjson.OPT_SORT_KEYS)
    )
    return digest.hexdigest()[:32]


def _key_shape(invoke: InvokeDef) -> list[int]:
    """A call site's key length, when not the default (so fingerprints from before
    ``keyLength`` stay as they were)."""
    return [] if invoke.key_length == KEY_LENGTH else [invoke.key_length]


def _node_shape(node: StateNode) -> dict[str, Any]:
    return {
        "id": node.id,
        "type": node.type,
        "parent": node.parent.id if node.parent else None,
        "initial": node.initial.id if node.initial else None,
        "history": node.history,
        "history_default": [t.id for t in node.history_default],
        "entry": [_action_shape(a) for a in node.entry],
        "exit": [_action_shape(a) for a in node.exit],
        "on": [_transition_shape(t) for t in (*node.transitions, *node.always)],
        "invoke": [
            [
                i.id,
                i.src,
                _shape_default(i.retry) if i.retry is not None else None,
                i.on_final_failure,
            ]
            for i in node.invoke
        ],
        "tags": sorted(node.tags),
        "output": _shape_default(node.output),
    }


def _transition_shape(t: Transition) -> list[Any]:
    return [
        t.event,
        [n.id for n in t.targets],
        _guard_shape(t.guard),
        [_action_shape(a) for a in t.actions],
        t.reenter,
        t.delay,
    ]


def _guard_shape(guard: GuardSpec | None) -> Any:
    if guard is None:
        return None
    return [guard.type, _shape_default(guard.params), [_guard_shape(c) for c in guard.children]]


def _action_shape(action: ActionSpec) -> list[Any]:
    return [action.type, _shape_default(action.params)]


def _shape_default(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return {str(k): _shape_default(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_shape_default(v) for v in value]
    if hasattr(value, "to_json"):
        return _shape_default(value.to_json())
    return _name_of(value)


def _runtime_builder(definition: Definition, impl: Implementations) -> _Builder:
    builder = _Builder(impl)
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
