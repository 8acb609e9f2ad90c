"""Configurations: sets of active state nodes, interned per machine.

A configuration knows everything about itself that does not depend on context: its state value,
tags, atomic states, whether any active state has eventless transitions, the plans of the
microsteps taken from it (``algorithm.Plan``) and the compiled routes of events taken there
(``routes``). Interning (``Configurations``) makes a configuration usable as a cache key by
identity.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from .errors import SnapshotError
from .frozen import FrozenDict
from .nodes import COMPOUND, FINAL, HISTORY, PARALLEL, StateNode

NOT_COMPILED: Any = object()
"""What a configuration holds for a compiled fact not computed yet."""


class Configuration:
    """An immutable, interned set of active state nodes."""

    __slots__ = (
        "__weakref__",
        "_chain_candidates",
        "atomic",
        "chain",
        "eventless",
        "has_always",
        "ids",
        "key",
        "leaves",
        "node_set",
        "nodes",
        "plans",
        "routes",
        "tags",
        "value",
    )

    def __init__(self, root: StateNode, node_set: frozenset[StateNode]) -> None:
        self.key = node_set
        self.node_set = node_set
        self.nodes: tuple[StateNode, ...] = tuple(sorted(node_set, key=_order))
        self.atomic = tuple(n for n in self.nodes if n.is_atomic)
        self.value = state_value(root, node_set)
        tags: set[str] = set()
        for node in self.nodes:
            tags |= node.tags
        self.tags = frozenset(tags)
        self.has_always = any(n.always for n in self.nodes)
        self.ids = frozenset(n.id for n in self.nodes)
        self.leaves = tuple(".".join(n.path) for n in self.atomic)
        # transition (or tuple of transitions) -> the plan of taking it from here
        # (filled by algorithm.plan_for)
        self.plans: dict[Any, Any] = {}
        # event type -> its compiled route here, or routes.full_step (filled by routes.take)
        self.routes: dict[str, Any] = {}
        # without parallel states the active states form one chain, leaf to root, and
        # selection is "the first enabled candidate along the chain"
        self.chain: tuple[StateNode, ...] | None = None
        if len(self.atomic) == 1 and not any(n.type == PARALLEL for n in self.nodes):
            leaf = self.atomic[0]
            self.chain = (leaf, *leaf.ancestors)
        self._chain_candidates: dict[str, tuple[Any, ...]] = {}
        # what arriving here by a compiled route does next (routes.eventless_route)
        self.eventless: Any = NOT_COMPILED

    def chain_candidates(self, event_type: str) -> tuple[Any, ...]:
        """For a single-chain configuration: every candidate transition for ``event_type``,
        innermost state first, each state's in its own priority order."""
        found = self._chain_candidates.get(event_type)
        if found is None:
            assert self.chain is not None
            found = tuple(t for node in self.chain for t in node.candidates(event_type))
            if len(self._chain_candidates) < 1024:
                self._chain_candidates[event_type] = found
        return found

    def __repr__(self) -> str:
        return f"<Configuration {sorted(self.ids)}>"


class Configurations:
    """The interned configurations of one machine, by node set and by persisted state value."""

    MAX_VALUES = 4096

    def __init__(self, root: StateNode) -> None:
        self.root = root
        self._by_nodes: dict[frozenset[StateNode], Configuration] = {}
        self._by_value: dict[bytes, Configuration] = {}

    def of_nodes(self, nodes: frozenset[StateNode]) -> Configuration:
        """The configuration of exactly these active nodes."""
        found = self._by_nodes.get(nodes)
        if found is None:
            found = self._by_nodes[nodes] = Configuration(self.root, nodes)
        return found

    def of_value(self, value: Any) -> Configuration:
        """The configuration a persisted state value names (validated the first time each
        distinct value is seen; the JSON text of the value is the cache key)."""
        key = orjson.dumps(value)
        found = self._by_value.get(key)
        if found is None:
            found = self.of_nodes(nodes_from_value(self.root, value))
            if len(self._by_value) < self.MAX_VALUES:
                self._by_value[key] = found
        return found

    def __iter__(self) -> Any:
        return iter(self._by_nodes.values())


def _order(node: StateNode) -> int:
    return node.order


def state_value(root: StateNode, nodes: frozenset[StateNode]) -> Any:
    """The XState state value: ``"a"``, ``{"a": "b"}``, ``{"p": {"r1": "x", "r2": "y"}}``."""
    return _value_of(root, nodes)


def _value_of(node: StateNode, nodes: frozenset[StateNode]) -> Any:
    active = [c for c in node.children if c in nodes]
    if node.type == COMPOUND and active:
        child = active[0]
        if child.is_atomic:
            return child.key
    return FrozenDict({c.key: _value_of(c, nodes) for c in active})


def nodes_from_value(root: StateNode, value: Any, field: str = "value") -> frozenset[StateNode]:
    """The active nodes a (complete) state value describes; raises SnapshotError naming the
    offending part of the value."""
    found: set[StateNode] = {root}
    _collect(root, value, found, field)
    return frozenset(found)


def _collect(node: StateNode, value: Any, found: set[StateNode], field: str) -> None:
    def child(key: Any, where: str) -> StateNode:
        match = next((c for c in node.children if c.key == key and c.type != HISTORY), None)
        if match is None:
            raise SnapshotError(where, f"state '{node.id}' has no child state {key!r}")
        return match

    if isinstance(value, str):
        if node.type != COMPOUND:
            raise SnapshotError(field, f"state '{node.id}' is {node.type}; it takes a mapping")
        leaf = child(value, field)
        if not leaf.is_atomic:
            raise SnapshotError(field, f"'{leaf.id}' is {leaf.type}; name its active children")
        found.add(leaf)
        return
    if not isinstance(value, dict):
        raise SnapshotError(
            field, f"a state value is a string or a mapping, not {type(value).__name__}"
        )
    if node.type == COMPOUND:
        if len(value) != 1:
            raise SnapshotError(field, f"compound state '{node.id}' has exactly one active child")
    elif node.type == PARALLEL:
        missing = {c.key for c in node.regions} - set(value)
        if missing:
            raise SnapshotError(
                field, f"parallel state '{node.id}' misses regions {sorted(missing)}"
            )
    elif value:
        raise SnapshotError(field, f"state '{node.id}' is {node.type}; it has no children")
    for key, sub in value.items():
        sub_node = child(key, f"{field}.{key}")
        found.add(sub_node)
        if sub_node.is_atomic:
            if sub != {} and sub != key:
                raise SnapshotError(f"{field}.{key}", f"'{sub_node.id}' is {sub_node.type}")
            continue
        _collect(sub_node, sub, found, f"{field}.{key}")


def in_final_state(nodes: Iterable[StateNode] | frozenset[StateNode], node: StateNode) -> bool:
    """True when ``node`` is done: a compound with an active final child, a parallel whose
    regions are all done, or a final state."""
    active = nodes if isinstance(nodes, set | frozenset) else set(nodes)
    if node.type == COMPOUND:
        return any(c.type == FINAL and c in active for c in node.children)
    if node.type == PARALLEL:
        return all(in_final_state(active, c) for c in node.regions)
    return node.type == FINAL
