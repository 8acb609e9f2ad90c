"""The machine: a validated definition plus its implementations, and the pure
``initial_transition`` / ``transition`` functions over snapshots.

``transition`` keeps a cache of transitions that only move between configurations (no guard
consulted, no action, no context change, no timers, no history): for those an event costs one
dictionary lookup. Every other event runs the full algorithm. The cache is invisible: results
are identical either way (the property tests check this).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from . import algorithm
from .actions import ActionSpec, BuiltinAction
from .configuration import Configuration, nodes_from_value, only_assigns
from .definition import (
    Definition,
    Implementations,
    build_definition,
    fingerprint_with,
    resolve_action,
    resolve_guard,
)
from .effects import NO_EFFECTS, Effect, SendParent, SendTo
from .errors import ImplementationError, SnapshotError
from .events import INIT, EventLike, normalize_event
from .frozen import EMPTY, FrozenDict, freeze
from .guards import GuardSpec
from .limits import MAX_DELAY
from .nodes import StateNode
from .snapshot import Snapshot, make_snapshot, persist, restore

Migration = Callable[[dict[str, Any]], Mapping[str, Any]]
Result = tuple[Snapshot, tuple[Effect, ...]]
_MOVES_PER_CONFIGURATION = 1024


class Machine:
    """A statechart machine. Create one with ``create_machine`` or ``setup().create_machine``."""

    def __init__(self, config: Mapping[str, Any], implementations: Implementations,
                 version: str | None = None,
                 migrations: Mapping[str, Migration] | None = None) -> None:
        self.config = config
        self.implementations = implementations
        self.definition: Definition = build_definition(config, implementations)
        self.version: str | None = version if version is not None else self.definition.version
        self.migrations: Mapping[str, Migration] = dict(migrations or {})
        self._fingerprint = self.definition.fingerprint if self.version == \
            self.definition.version else fingerprint_with(
                self.definition.legacy_fingerprint, self.definition.nodes, self.version,
                self.definition.context)
        self.has_always = any(n.always for n in self.definition.nodes)
        self.fast_paths = True
        """Shortcuts for events that only move between configurations or only assign; they
        give the same results as the full algorithm (tests switch them off to compare)."""
        self._configurations: dict[frozenset[StateNode], Configuration] = {}
        self._by_value: dict[bytes, Configuration] = {}
        self._events: dict[str, FrozenDict] = {}
        self._paths: dict[str, StateNode | None] = {}

    # -- identity ----------------------------------------------------------------------------

    @property
    def id(self) -> str:
        """The machine id (config ``id``)."""
        return self.definition.machine_id

    @property
    def root(self) -> StateNode:
        """The root of the state-node tree."""
        return self.definition.root

    @property
    def fingerprint(self) -> str:
        """A hash of everything in the definition that changes behaviour (its version too)."""
        return self._fingerprint

    def get_state_node(self, state_id: str) -> StateNode:
        """The state node with full id ``state_id`` (``#`` optional)."""
        node = self.definition.by_id.get(state_id.removeprefix("#"))
        if node is None:
            raise KeyError(f"machine {self.id!r} has no state {state_id!r}")
        return node

    def provide(self, *, guards: Mapping[str, Any] | None = None,
                actions: Mapping[str, Any] | None = None,
                actors: Mapping[str, Any] | None = None,
                delays: Mapping[str, Any] | None = None) -> Machine:
        """A copy of this machine with some implementations replaced (XState's ``provide``)."""
        extra = Implementations(guards or {}, actions or {}, actors or {}, delays or {})
        return Machine(self.config, self.implementations.merged(extra), self.version,
                       self.migrations)

    # -- the pure core -----------------------------------------------------------------------

    def initial_transition(self, input: Any = None, now: int | None = None) -> Result:
        """The machine's initial snapshot and the effects of starting it."""
        return self.start(input, _fixed(now))

    def transition(self, snapshot: Snapshot, event: EventLike, now: int | None = None) -> Result:
        """The snapshot after ``event`` and the effects to run, in order. Pure.

        ``now`` (epoch ms) dates the timers this step schedules; it defaults to 0.
        """
        return self.step(snapshot, normalize_event(event), _fixed(now))

    def fire_timer(self, snapshot: Snapshot, timer_id: str, now: int | None = None) -> Result:
        """Deliver the pending timer ``timer_id`` (a runtime calls this when it is due)."""
        return self.deliver_timer(snapshot, timer_id, _fixed(now))

    def stop(self, snapshot: Snapshot) -> Result:
        """The snapshot with status ``stopped``: children stopped, timers cancelled."""
        step = self._step_from(snapshot, _fixed(None))
        algorithm._stop_everything(step)
        step.status = "stopped"
        return self._snapshot_from(step, snapshot), tuple(step.effects)

    def fail(self, snapshot: Snapshot, error: Any) -> Result:
        """The snapshot with status ``error`` (a runtime calls this when an action raised)."""
        step = self._step_from(snapshot, _fixed(None))
        algorithm._stop_everything(step)
        step.status = "error"
        step.error = freeze(error, "error")
        return self._snapshot_from(step, snapshot), tuple(step.effects)

    def start(self, input: Any, now: Callable[[], int], trace: list[Any] | None = None
              ) -> Result:
        """``initial_transition`` with a clock function (for runtimes). With a ``trace`` list,
        the microsteps after the initial entry are traced as in ``step``."""
        frozen_input = freeze(input, "input")
        event = FrozenDict(type=INIT, input=frozen_input) if input is not None else \
            self.event(INIT)
        step = algorithm.Step(self, None, self._initial_context(frozen_input), EMPTY, (), EMPTY,
                              now)
        step.trace = trace
        algorithm.enter_initial_states(step, event)
        algorithm.settle(step, event)
        return self._snapshot_from(step, None), tuple(step.effects)

    def step(self, snapshot: Snapshot, event: FrozenDict, now: Callable[[], int],
             trace: list[Any] | None = None) -> Result:
        """``transition`` with a normalized event and a clock function (for runtimes).

        With a ``trace`` list, each microstep appends ``(event, transitions)`` to it.
        """
        if snapshot._status != "active":
            return snapshot, NO_EFFECTS  # a finished machine ignores events, as in XState
        if snapshot._machine is not self:
            self._check_owner(snapshot)
        configuration = snapshot._configuration
        if trace is None and self.fast_paths:
            moved = configuration.moves.get(event["type"])
            if moved is not None:
                if moved is configuration:
                    return snapshot, NO_EFFECTS
                return make_snapshot(self, moved, snapshot._context, "active", None, None,
                                     snapshot._history, snapshot._timers, snapshot._children,
                                     snapshot._retries, snapshot._skipped), NO_EFFECTS
        step = self._step_from(snapshot, now)
        step.trace = trace
        selected: list[Any] | None = None
        candidates = configuration.chain_only(event["type"]) if self.fast_paths else None
        if candidates is not None and trace is None:
            chosen = algorithm.first_enabled(candidates, step, event)
            # a guard given the scope (SCXML's) may have queued events or started timers
            pristine = not (step.queue or step.timers_changed or step.children_changed or
                            step.status != "active")
            if pristine and (chosen is None or only_assigns(chosen)):
                return self._context_only_step(snapshot, step, chosen, event)
            selected = [] if chosen is None else [chosen]
        algorithm.macrostep(step, event, selected)
        result = self._snapshot_from(step, snapshot)
        if self._is_plain_move(step, snapshot, result):
            self._remember(configuration, event["type"], result._configuration)
        return result, tuple(step.effects)

    def _context_only_step(self, snapshot: Snapshot, step: algorithm.Step, chosen: Any,
                           event: FrozenDict) -> Result:
        """The chosen transition (or none) is targetless and only assigns or runs user
        actions, in a configuration without eventless transitions: the macrostep cannot
        change the configuration or raise anything, so it is just these actions."""
        if chosen is not None and chosen.actions:
            algorithm.run_actions(step, chosen.actions, event)
        if step.context is snapshot._context and not step.effects:
            return snapshot, NO_EFFECTS
        return make_snapshot(self, snapshot._configuration, step.context, "active", None, None,
                             snapshot._history, snapshot._timers, snapshot._children,
                             snapshot._retries, snapshot._skipped), tuple(step.effects)

    def deliver_timer(self, snapshot: Snapshot, timer_id: str, now: Callable[[], int],
                      trace: list[Any] | None = None) -> Result:
        """``fire_timer`` with a clock function (for runtimes)."""
        timer = next((t for t in snapshot._timers if t.id == timer_id), None)
        if timer is None or snapshot._status != "active":
            return snapshot, NO_EFFECTS
        step = self._step_from(snapshot, now)
        step.trace = trace
        del step.timers[timer_id]
        step.timers_changed = True
        if timer.target is None:
            algorithm.macrostep(step, timer.event)
        elif timer.target == "#parent":
            step.effects.append(SendParent(timer.event))
        else:
            step.effects.append(SendTo(timer.target, timer.event))
        return self._snapshot_from(step, snapshot), tuple(step.effects)

    def can(self, snapshot: Snapshot, event: EventLike) -> bool:
        """True when ``event`` would take a transition with a target or actions."""
        if snapshot._status != "active":
            return False
        step = self._step_from(snapshot, _fixed(None))
        transitions = algorithm.select_transitions(step, normalize_event(event))
        return any(t.targets or t.actions for t in transitions)

    # -- persistence -------------------------------------------------------------------------

    def persist(self, snapshot: Snapshot) -> dict[str, Any]:
        """The snapshot as JSON types (see ``snapshot.persist``)."""
        return persist(snapshot)

    def restore(self, data: Mapping[str, Any] | bytes | str) -> Snapshot:
        """A snapshot from ``persist`` output or its JSON bytes, validated field by field."""
        return restore(self, data)

    # -- helpers for the algorithm and runtimes ----------------------------------------------

    def event(self, event_type: str) -> FrozenDict:
        """A cached frozen ``{"type": event_type}``."""
        found = self._events.get(event_type)
        if found is None:
            found = self._events[event_type] = FrozenDict(type=event_type)
        return found

    def resolve_delay(self, delay: Any, context: Any, event: Any,
                      step: algorithm.Step | None = None) -> int:
        """Milliseconds for ``delay``: a number, a name from ``delays=``, or a function."""
        name = delay if isinstance(delay, str) else getattr(delay, "__name__", "delay")
        value = delay
        retried = self.definition.retry_delays.get(delay) if isinstance(delay, str) else None
        if retried is not None and step is not None:
            record = step.retries[retried.id]
            return int(retried.retry.delay_for(record["attempt"], record["last_error"],
                                               record["key"]))
        if isinstance(delay, str):
            if delay not in self.implementations.delays:
                raise ImplementationError(f"delay {delay!r}", LookupError("no such delay"))
            value = self.implementations.delays[delay]
        if callable(value):
            try:
                value = value(context, event)
            except Exception as exc:
                raise ImplementationError(f"delay {name!r}", exc) from exc
        if isinstance(value, bool) or not isinstance(value, int | float) or \
                not math.isfinite(value) or value < 0:
            raise ImplementationError(f"delay {name!r}", ValueError(
                f"a delay is a non-negative number of milliseconds, not {value!r}"))
        if value > MAX_DELAY:  # its due time must still persist as a JSON integer
            raise ImplementationError(f"delay {name!r}", ValueError(
                f"a delay is at most {MAX_DELAY} ms, not {value!r}"))
        return int(value)

    def resolve_actor(self, src: Any) -> tuple[str, Any]:
        """(name, logic) for a ``src``: a name from ``actors=`` or actor logic itself."""
        if isinstance(src, str):
            logic = self.implementations.actors.get(src)
            if logic is None:
                raise ImplementationError(f"actor {src!r}", LookupError(
                    f"no actor named {src!r} in actors= (known: "
                    f"{', '.join(sorted(self.implementations.actors)) or 'none'})"))
            return src, logic
        return str(getattr(src, "name", None) or getattr(src, "__name__", "actor")), src

    def resolve_guard(self, guard: Any) -> GuardSpec:
        """A guard given at run time (``check`` in ``enqueue_actions``), resolved."""
        return resolve_guard(self.definition, self.implementations, guard)

    def resolve_action(self, action: Any) -> ActionSpec:
        """An action given at run time (``enqueue`` in ``enqueue_actions``), resolved."""
        if isinstance(action, ActionSpec):
            return action
        if isinstance(action, BuiltinAction):
            return ActionSpec(action.type, None, action)
        return resolve_action(self.definition, self.implementations, action)

    def _initial_context(self, input: Any) -> FrozenDict:
        context = self.definition.context
        if callable(context):
            try:
                context = context(input)
            except Exception as exc:
                raise ImplementationError("context", exc) from exc
        if context is None:
            return EMPTY
        frozen = freeze(context, "")
        if not isinstance(frozen, FrozenDict):
            raise ImplementationError("context", TypeError("context must be a mapping"))
        return frozen

    def _configuration_of_value(self, value: Any) -> Configuration:
        """The configuration a persisted state value names (validated the first time each
        distinct value is seen; the JSON text of the value is the cache key)."""
        key = orjson.dumps(value)
        found = self._by_value.get(key)
        if found is None:
            found = self._configuration_for(nodes_from_value(self.root, value))
            if len(self._by_value) < 4096:
                self._by_value[key] = found
        return found

    def _configuration_for(self, nodes: frozenset[StateNode]) -> Configuration:
        found = self._configurations.get(nodes)
        if found is None:
            found = self._configurations[nodes] = Configuration(self.root, nodes)
        return found

    def _step_from(self, snapshot: Snapshot, now: Callable[[], int]) -> algorithm.Step:
        return algorithm.Step(self, snapshot._configuration, snapshot._context,
                              snapshot._history, snapshot._timers, snapshot._children, now,
                              snapshot._retries, snapshot._skipped)

    def _snapshot_from(self, step: algorithm.Step, before: Snapshot | None) -> Snapshot:
        configuration = step.configuration or self._configuration_for(frozenset(step.nodes))
        if before is not None and not step.timers_changed:
            timers = before._timers
        else:
            timers = tuple(sorted(step.timers.values(), key=lambda t: (t.due_at, t.id)))
        if before is not None and not step.children_changed:
            children = before._children
        else:
            children = FrozenDict(step.children)
        return make_snapshot(self, configuration, step.context, step.status, step.output,
                             step.error, step.history, timers, children, step.retries,
                             step.skipped)

    def _is_plain_move(self, step: algorithm.Step, before: Snapshot, after: Snapshot) -> bool:
        return (not step.effects and not step.guards_used and not step.builtins_run and
                not step.history_read and
                step.microsteps <= 1 and after._status == "active" and
                after._context is before._context and after._history is before._history and
                after._timers is before._timers and after._children is before._children and
                after._retries is before._retries and not after._configuration.has_always)

    def _remember(self, configuration: Configuration, event_type: str,
                  result: Configuration) -> None:
        if len(configuration.moves) < _MOVES_PER_CONFIGURATION:
            configuration.moves[event_type] = result

    def _check_owner(self, snapshot: Snapshot) -> None:
        other = snapshot._machine
        if other.definition is not self.definition and other.fingerprint != self.fingerprint:
            raise SnapshotError("machine", f"this snapshot belongs to machine {other.id!r} "
                                f"(fingerprint {other.fingerprint}), not {self.id!r}")

    def _matches(self, configuration: Configuration, value: Any) -> bool:
        paths = [value] if isinstance(value, str) else _paths_of(value, "")
        for path in paths:
            node = self._paths.get(path)
            if node is None and path not in self._paths:
                node = self._paths[path] = _node_at(self.root, path)
            if node is None or node not in configuration.node_set:
                return False
        return True

    def __repr__(self) -> str:
        return f"<Machine {self.id!r} ({len(self.definition.nodes)} states)>"


def _fixed(now: int | None) -> Callable[[], int]:
    moment = 0 if now is None else int(now)
    return lambda: moment


def _paths_of(value: Any, prefix: str) -> list[str]:
    if isinstance(value, str):
        return [f"{prefix}{value}"]
    if not isinstance(value, Mapping):
        raise TypeError(f"a state value is a string or a mapping, not {type(value).__name__}")
    paths = []
    for key, sub in value.items():
        paths.append(f"{prefix}{key}")
        if sub:
            paths.extend(_paths_of(sub, f"{prefix}{key}."))
    return paths


def _node_at(root: StateNode, path: str) -> StateNode | None:
    node = root
    for key in path.split("."):
        node = next((c for c in node.children if c.key == key), None)  # type: ignore[assignment]
        if node is None:
            return None
    return node


def create_machine(config: Mapping[str, Any], *, guards: Mapping[str, Any] | None = None,
                   actions: Mapping[str, Any] | None = None,
                   actors: Mapping[str, Any] | None = None,
                   delays: Mapping[str, Any] | None = None, version: str | None = None,
                   migrations: Mapping[str, Migration] | None = None) -> Machine:
    """Validate ``config`` (XState v5 keys) and build a machine, or raise
    ``MachineDefinitionError`` listing every problem with its path."""
    return Machine(config, Implementations(guards or {}, actions or {}, actors or {},
                                           delays or {}), version, migrations)


class Setup:
    """Implementations bound once, for several machines (XState's ``setup``)."""

    def __init__(self, implementations: Implementations) -> None:
        self.implementations = implementations

    def create_machine(self, config: Mapping[str, Any], *, version: str | None = None,
                       migrations: Mapping[str, Migration] | None = None) -> Machine:
        """A machine using these implementations."""
        return Machine(config, self.implementations, version, migrations)


def setup(*, guards: Mapping[str, Any] | None = None, actions: Mapping[str, Any] | None = None,
          actors: Mapping[str, Any] | None = None,
          delays: Mapping[str, Any] | None = None) -> Setup:
    """``setup(guards=..., actions=..., actors=..., delays=...).create_machine(config)``."""
    return Setup(Implementations(guards or {}, actions or {}, actors or {}, delays or {}))
