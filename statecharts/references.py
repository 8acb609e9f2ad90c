"""What a machine config refers to, resolved: target states by name, path or ``#id``; guards
and actions by name (``{type, params}``), as functions or built-ins, against the
``Implementations``; each problem collected with its config path, a close name suggested.

``References`` is the base of the definition's builder (``definition._Builder``, which adds
the tree and the transitions) and resolves guards and actions given at run time
(``definition.resolve_guard`` / ``resolve_action``).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from .actions import ActionSpec, BuiltinAction
from .errors import ContextError, MissingImplementation
from .frozen import freeze
from .guards import GuardSpec
from .nodes import StateNode


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


class References:
    """Resolves what a config names, collecting problems (``problems``, with the
    implementations missing in ``missing``) instead of raising."""

    def __init__(self, impl: Implementations) -> None:
        self.impl = impl
        self.problems: list[str] = []
        self.missing: list[MissingImplementation] = []
        self.nodes: list[StateNode] = []
        self.by_id: dict[str, StateNode] = {}

    def problem(self, path: str, message: str) -> None:
        self.problems.append(f"{path or '<root>'}: {message}")

    def no_implementation(
        self, kind: str, name: str, path: str, known: Iterable[Any], note: str = ""
    ) -> None:
        """A named guard/action/actor/delay the implementations lack (``validate`` reports
        these as what the file expects the code to provide)."""
        self.missing.append(MissingImplementation(kind, name, path))
        self.problem(path, f"no {kind} '{name}'{did_you_mean(name, known)}{note}")

    # -- target states ---------------------------------------------------------------------

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
        self.problem(path, f"no state with id '{reference}'{did_you_mean(reference, self.by_id)}")
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
                    f"{did_you_mean(key, node.children)}",
                )
                return None
            node = child
        return node

    # -- guards ----------------------------------------------------------------------------

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
                self.problem(join_path(path, "type"), "a guard mapping needs a string 'type'")
                return None
            return self._named_guard(kind, value.get("params"), path)
        if callable(value):
            return GuardSpec(name_of(value), fn=value)
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
        params = self._params(params, join_path(path, "params"))
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

    # -- actions ---------------------------------------------------------------------------

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
                self.problem(join_path(path, "type"), "an action mapping needs a string 'type'")
                return None
            return self._named_action(kind, value.get("params"), path)
        if callable(value):
            return ActionSpec(name_of(value), None, value)
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
        return ActionSpec(name, self._params(params, join_path(path, "params")), impl)

    # -- values ----------------------------------------------------------------------------

    def _description(self, value: Any, path: str) -> str | None:
        if value is not None and not isinstance(value, str):
            self.problem(path, "a description is a string")
            return None
        return value

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

    def _unknown_key(self, path: str, key: str, allowed: Iterable[str]) -> None:
        self.problem(path, f"unknown key '{key}'{did_you_mean(key, allowed)}")


def join_path(path: str, key: str) -> str:
    """``key`` under the config path ``path``."""
    return f"{path}.{key}" if path else key


def did_you_mean(word: Any, options: Iterable[Any]) -> str:
    """`` (did you mean '<closest>'?)`` when one of ``options`` is close to ``word``."""
    names = [getattr(o, "key", o) for o in options]
    close = difflib.get_close_matches(str(word), [str(n) for n in names], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def name_of(fn: Any) -> str:
    """The name a function given in a config is recorded by."""
    return str(getattr(fn, "name", None) or getattr(fn, "__name__", None) or type(fn).__name__)
