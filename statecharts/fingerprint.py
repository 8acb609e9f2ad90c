"""The fingerprint of a definition: a hash of everything that changes behaviour (descriptions
and meta excluded), which snapshots are checked against when a run is restored."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from .actions import ActionSpec
from .guards import GuardSpec
from .idempotency import KEY_LENGTH
from .nodes import InvokeDef, StateNode, Transition
from .references import name_of


def fingerprint(root: StateNode, nodes: list[StateNode]) -> str:
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
    return name_of(value)
