"""The state-node tree: the normalized, validated form of a machine config.

Built once by ``definition.py`` and never changed afterwards. Every lookup the algorithm needs
(children in document order, ancestors, candidate transitions per event type) is precomputed
or memoized here so an event costs in proportion to the active states, not the chart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .actions import ActionSpec
from .events import WILDCARD
from .guards import GuardSpec

ATOMIC, COMPOUND, PARALLEL, FINAL, HISTORY = "atomic", "compound", "parallel", "final", "history"


class Transition:
    """One transition: ``source`` --event [guard] / actions--> ``targets``."""

    __slots__ = (
        "actions",
        "config_path",
        "delay",
        "description",
        "event",
        "guard",
        "guard_fn",
        "has_history_target",
        "meta",
        "order",
        "reenter",
        "source",
        "targets",
    )

    def __init__(
        self,
        source: StateNode,
        event: str | None,
        targets: tuple[StateNode, ...],
        guard: GuardSpec | None,
        actions: tuple[ActionSpec, ...],
        reenter: bool,
        *,
        delay: int | str | None = None,
        description: str | None = None,
        meta: Mapping[str, Any] | None = None,
        config_path: str = "",
    ) -> None:
        self.source = source
        self.event = event
        self.targets = targets
        self.guard = guard
        self.actions = actions
        self.reenter = reenter
        self.delay = delay
        self.description = description
        self.meta = meta
        self.order = 0
        self.config_path = config_path
        self.has_history_target = any(t.type == HISTORY for t in targets)
        # a named or inline user guard without params is called directly: fn(context, event)
        self.guard_fn = (
            guard.fn
            if guard is not None
            and guard.fn is not None
            and not guard.params
            and not getattr(guard.fn, "takes_scope", False)
            else None
        )

    @property
    def is_forbidden(self) -> bool:
        """A transition with no target and no actions swallows its event."""
        return not self.targets and not self.actions

    def __repr__(self) -> str:
        targets = ",".join(t.id for t in self.targets) or "-"
        return f"<Transition {self.source.id} --{self.event or 'always'}--> {targets}>"


class InvokeDef:
    """An actor invoked while its state is active: started on entry, stopped on exit."""

    __slots__ = (
        "breaker",
        "config_path",
        "description",
        "external",
        "heartbeat_ms",
        "id",
        "input",
        "key_length",
        "limit",
        "logic",
        "on_final_failure",
        "retry",
        "src",
        "system_id",
        "timeout_ms",
        "transient",
    )

    def __init__(
        self,
        id: str,
        src: str,
        input: Any,
        system_id: str | None,
        retry: Any,
        on_final_failure: str | None,
        config_path: str,
        logic: Any,
        description: str | None = None,
        breaker: str | None = None,
        external: bool = False,
        transient: bool | tuple[str, ...] = False,
        limit: str | None = None,
        timeout_ms: int | None = None,
        heartbeat_ms: int | None = None,
        key_length: int = 32,
    ) -> None:
        self.id = id
        self.key_length = key_length
        """The config's ``keyLength``: characters in this call's idempotency key."""
        self.timeout_ms = timeout_ms
        """The config's ``timeout``: how long one attempt of the call may take (ms); a later
        end is a failure named `CallTimeoutError` (retried and matched like any error)."""
        self.heartbeat_ms = heartbeat_ms
        """The config's ``heartbeatTimeout``: the longest a durable call may go without a
        ``heartbeat()`` (ms); a longer silence fails the attempt (`CallHeartbeatTimeoutError`)."""
        self.limit = limit
        """The config's ``limit``: the shared limit (concurrency, rate) calls from here go
        through on the durable runtime; scheduling only, so not part of the fingerprint."""
        self.transient = transient
        """The config's ``transient``: failures that roll the durable step back (True: every
        error; a tuple: errors with one of these class names) instead of reaching onError."""
        self.external = external
        self.description = description
        self.breaker = breaker
        self.src = src
        self.input = input
        self.system_id = system_id
        self.retry = retry
        self.on_final_failure = on_final_failure
        self.config_path = config_path
        self.logic = logic


class StateNode:
    """A state in the tree. ``type`` is atomic, compound, parallel, final or history."""

    __slots__ = (
        "_by_event",
        "_candidates",
        "_wildcards",
        "after_timers",
        "always",
        "ancestors",
        "children",
        "config_path",
        "depth",
        "description",
        "entry",
        "exit",
        "failure",
        "history",
        "history_children",
        "history_default",
        "id",
        "initial",
        "invoke",
        "key",
        "machine_id",
        "meta",
        "order",
        "output",
        "parent",
        "path",
        "regions",
        "retry",
        "retry_attempt_of",
        "retry_invoke",
        "tags",
        "transitions",
        "type",
    )

    def __init__(
        self, key: str, id: str, path: tuple[str, ...], parent: StateNode | None, config_path: str
    ) -> None:
        self.key = key
        self.id = id
        self.path = path
        self.parent = parent
        self.config_path = config_path
        self.type = ATOMIC
        self.children: tuple[StateNode, ...] = ()
        self.initial: StateNode | None = None
        self.history: str | None = None
        self.history_default: tuple[StateNode, ...] = ()
        self.entry: tuple[ActionSpec, ...] = ()
        self.exit: tuple[ActionSpec, ...] = ()
        self.transitions: tuple[Transition, ...] = ()
        self.always: tuple[Transition, ...] = ()
        self.invoke: tuple[InvokeDef, ...] = ()
        self.tags: frozenset[str] = frozenset()
        self.meta: Mapping[str, Any] | None = None
        self.description: str | None = None
        self.output: Any = None
        self.failure: str | None = None
        """For a final state declared ``failure``: the reason reaching it fails the machine."""
        self.order = 0
        self.depth: int = 0 if parent is None else parent.depth + 1
        self.ancestors: tuple[StateNode, ...] = (
            () if parent is None else (parent, *parent.ancestors)
        )
        self.after_timers: tuple[tuple[str, int | str], ...] = ()
        self.history_children: tuple[StateNode, ...] = ()
        self.regions: tuple[StateNode, ...] = ()
        self._candidates: dict[str, tuple[Transition, ...]] = {}
        self._by_event: dict[str, list[Transition]] = {}
        self._wildcards: list[tuple[str, list[Transition]]] = []
        self.machine_id = ""
        self.retry: Any = None
        self.retry_invoke: str | None = None
        self.retry_attempt_of: StateNode | None = None

    @property
    def is_atomic(self) -> bool:
        """Atomic and final states have no active children."""
        return self.type == ATOMIC or self.type == FINAL

    def is_descendant_of(self, other: StateNode) -> bool:
        """True when ``other`` is a proper ancestor of this node."""
        return other in self.ancestors

    def candidates(self, event_type: str) -> tuple[Transition, ...]:
        """Transitions of this node that ``event_type`` may take, in priority order.

        Exact descriptors first, then ``prefix.*`` descriptors longest first, then ``*``; within
        each, document order. (XState stops at the exact match even when its guards fail; here
        the wildcards still get their turn: see docs/semantics.md.)
        """
        found = self._candidates.get(event_type)
        if found is None:
            exact = self._by_event.get(event_type, [])
            partial: list[Transition] = []
            for descriptor, transitions in self._wildcards:
                if (
                    descriptor == WILDCARD
                    or event_type == descriptor[:-2]
                    or event_type.startswith(descriptor[:-1])
                ):
                    partial.extend(transitions)
            found = tuple(exact) + tuple(partial)
            if len(self._candidates) < 4096:
                self._candidates[event_type] = found
        return found

    def index_transitions(self) -> None:
        """Build the per-event lookup used by ``candidates``."""
        by_event: dict[str, list[Transition]] = {}
        for transition in self.transitions:
            assert transition.event is not None
            by_event.setdefault(transition.event, []).append(transition)
        self._wildcards = sorted(
            ((d, ts) for d, ts in by_event.items() if d == WILDCARD or d.endswith(".*")),
            key=lambda item: -len(item[0]) if item[0] != WILDCARD else 1,
        )
        self._by_event = {
            d: ts for d, ts in by_event.items() if not (d == WILDCARD or d.endswith(".*"))
        }
        self._candidates = {}

    def __repr__(self) -> str:
        return f"<StateNode {self.id} ({self.type})>"
