"""The machine: a validated definition plus its implementations, and the pure
``initial_transition`` / ``transition`` functions over snapshots.

Every microstep runs through a plan (``algorithm.Plan``: exits, actions, entries, target
configuration) that the algorithm computes once per configuration and transition set and keeps
on the configuration, and an event is taken by its compiled route (``routes.take``) where it
has one. ``machine.plans = False`` computes every plan afresh and takes no route instead;
results are identical either way (the property tests check this).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from . import algorithm
from .actions import ActionSpec
from .configuration import Configuration, Configurations
from .definition import (
    Definition,
    Implementations,
    build_definition,
    resolve_actor,
    resolve_guard,
)
from .effects import NO_EFFECTS, Effect, SendParent, SendTo
from .errors import ImplementationError, SnapshotError
from .events import INIT, EventLike, interned_event, normalize_event
from .fingerprint import fingerprint_with
from .frozen import EMPTY, FrozenDict, freeze
from .guards import GuardSpec
from .nodes import StateNode
from .routes import take
from .snapshot import Snapshot, persist, restore

Migration = Callable[[dict[str, Any]], Mapping[str, Any]]
Result = tuple[Snapshot, tuple[Effect, ...]]


class Machine:
    """A statechart machine. Create one with ``create_machine`` or ``setup().create_machine``."""

    def __init__(
        self,
        config: Mapping[str, Any],
        implementations: Implementations,
        version: str | None = None,
        migrations: Mapping[str, Migration] | None = None,
    ) -> None:
        self.config = config
        self.implementations = implementations
        self.definition: Definition = build_definition(config, implementations)
        self.version: str | None = version if version is not None else self.definition.version
        self.migrations: Mapping[str, Migration] = dict(migrations or {})
        self._fingerprint = (
            self.definition.fingerprint
            if self.version == self.definition.version
            else fingerprint_with(
                self.definition.legacy_fingerprint,
                self.definition.nodes,
                self.version,
                self.definition.context,
            )
        )
        self.plans = True
        """Keep each microstep's plan on its configuration and reuse it (False: compute every
        plan afresh, the reference the property tests compare with)."""
        self.configurations = Configurations(self.definition.root)
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

    def provide(
        self,
        *,
        guards: Mapping[str, Any] | None = None,
        actions: Mapping[str, Any] | None = None,
        actors: Mapping[str, Any] | None = None,
        delays: Mapping[str, Any] | None = None,
    ) -> Machine:
        """A copy of this machine with some implementations replaced (XState's ``provide``)."""
        extra = Implementations(guards or {}, actions or {}, actors or {}, delays or {})
        return Machine(
            self.config, self.implementations.merged(extra), self.version, self.migrations
        )

    # -- the pure core -----------------------------------------------------------------------

    def initial_transition(self, input: Any = None, now: int | None = None) -> Result:
        """The machine's initial snapshot and the effects of starting it."""
        return self.start(input, fixed_clock(now))

    def transition(self, snapshot: Snapshot, event: EventLike, now: int | None = None) -> Result:
        """The snapshot after ``event`` and the effects to run, in order. Pure.

        ``now`` (epoch ms) dates the timers this step schedules; it defaults to 0.
        It is ``step(snapshot, normalize_event(event), <the clock at now>)``, taking the
        event's compiled route (``routes.take``) itself: such an event costs no ``step`` call.
        """
        # normalize_event's two fast cases first, without its call: a string seen before, an
        # event frozen already (the engine's own events, a runtime's); ``kind`` is its type
        if type(event) is str:
            kind: Any = event
            normalized = interned_event(event)
        elif type(event) is FrozenDict and type(kind := event.get("type")) is str:
            normalized = event
        else:
            normalized = None
        if (
            normalized is not None
            and snapshot.machine is self
            and snapshot.status == "active"
            and self.plans
        ):
            taken = snapshot.configuration.routes.get(kind, take)(
                snapshot, snapshot.context, normalized, None, None
            )
            return (
                taken
                if taken is not None
                else self._macrostep(snapshot, normalized, fixed_clock(now), None)
            )
        return self.step(
            snapshot,
            normalized if normalized is not None else normalize_event(event),
            fixed_clock(now),
        )

    def fire_timer(self, snapshot: Snapshot, timer_id: str, now: int | None = None) -> Result:
        """Deliver the pending timer ``timer_id`` (a runtime calls this when it is due)."""
        return self.deliver_timer(snapshot, timer_id, fixed_clock(now))

    def stop(self, snapshot: Snapshot) -> Result:
        """The snapshot with status ``stopped``: children stopped, timers cancelled."""
        step = self._step_from(snapshot, _ZERO)
        algorithm._stop_everything(step)
        step.status = "stopped"
        return step.result(self), tuple(step.effects)

    def fail(self, snapshot: Snapshot, error: Any) -> Result:
        """The snapshot with status ``error`` (a runtime calls this when an action raised)."""
        step = self._step_from(snapshot, _ZERO)
        algorithm._stop_everything(step)
        step.status = "error"
        step.error = freeze(error, "error")
        return step.result(self), tuple(step.effects)

    def start(self, input: Any, now: Callable[[], int], trace: list[Any] | None = None) -> Result:
        """``initial_transition`` with a clock function (for runtimes). With a ``trace`` list,
        the microsteps after the initial entry are traced as in ``step``."""
        frozen_input = freeze(input, "input")
        event = (
            FrozenDict(type=INIT, input=frozen_input)
            if input is not None
            else normalize_event(INIT)
        )
        step = algorithm.Step(
            self.definition,
            self.implementations,
            self.configurations,
            None,
            now,
            self._initial_context(frozen_input),
            trace,
            self.plans,
        )
        algorithm.enter_initial_states(step, event)
        algorithm.settle(step, event)
        return step.result(self), tuple(step.effects)

    def step(
        self,
        snapshot: Snapshot,
        event: FrozenDict,
        now: Callable[[], int],
        trace: list[Any] | None = None,
    ) -> Result:
        """``transition`` with a normalized event and a clock function (for runtimes).

        With a ``trace`` list, each microstep appends ``(event, transitions)`` to it.
        (``transition`` and ``Actor.send`` take the route, ``routes.take``, themselves.)
        """
        if snapshot.status != "active":
            return snapshot, NO_EFFECTS  # a finished machine ignores events, as in XState
        if snapshot.machine is not self:
            self._check_owner(snapshot)
        if self.plans:
            taken: Result | None = snapshot.configuration.routes.get(event["type"], take)(
                snapshot, snapshot.context, event, None, trace
            )
            if taken is not None:
                return taken
        return self._macrostep(snapshot, event, now, trace)

    def _macrostep(
        self, snapshot: Snapshot, event: FrozenDict, now: Callable[[], int], trace: list[Any] | None
    ) -> Result:
        """The full step (``algorithm.macrostep``) of an event no compiled route took."""
        step = algorithm.Step(
            self.definition,
            self.implementations,
            self.configurations,
            snapshot,
            now,
            EMPTY,
            trace,
            self.plans,
        )
        algorithm.macrostep(step, event)
        effects = step.effects
        return step.result(self), tuple(effects) if effects else NO_EFFECTS

    def deliver_timer(
        self,
        snapshot: Snapshot,
        timer_id: str,
        now: Callable[[], int],
        trace: list[Any] | None = None,
    ) -> Result:
        """``fire_timer`` with a clock function (for runtimes)."""
        timer = next((t for t in snapshot.timers if t.id == timer_id), None)
        if timer is None or snapshot.status != "active":
            return snapshot, NO_EFFECTS
        step = self._step_from(snapshot, now, trace)
        del step.timers[timer_id]
        if timer.target is None:
            algorithm.macrostep(step, timer.event)
        elif timer.target == "#parent":
            step.effects.append(SendParent(timer.event))
        else:
            step.effects.append(SendTo(timer.target, timer.event))
        return step.result(self), tuple(step.effects)

    def can(self, snapshot: Snapshot, event: EventLike) -> bool:
        """True when ``event`` would take a transition with a target or actions."""
        if snapshot.status != "active":
            return False
        step = self._step_from(snapshot, _ZERO)
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
        return normalize_event(event_type)

    def resolve_actor(self, src: Any) -> tuple[str, Any]:
        """(name, logic) for a ``src``: a name from ``actors=`` or actor logic itself."""
        return resolve_actor(self.implementations, src)

    def resolve_guard(self, guard: Any) -> GuardSpec:
        """A guard given at run time (``check`` in ``enqueue_actions``), resolved."""
        return resolve_guard(self.definition, self.implementations, guard)

    def resolve_action(self, action: Any) -> ActionSpec:
        """An action given at run time (``enqueue`` in ``enqueue_actions``), resolved."""
        return algorithm._action_spec(self.definition, self.implementations, action)

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

    def configuration_of_value(self, value: Any) -> Configuration:
        """The configuration a persisted state value names (``SnapshotError`` if none)."""
        return self.configurations.of_value(value)

    def _step_from(
        self, snapshot: Snapshot, now: Callable[[], int], trace: list[Any] | None = None
    ) -> algorithm.Step:
        return algorithm.Step(
            self.definition,
            self.implementations,
            self.configurations,
            snapshot,
            now,
            EMPTY,
            trace,
            self.plans,
        )

    def _check_owner(self, snapshot: Snapshot) -> None:
        other = snapshot.machine
        if other.definition is not self.definition and other.fingerprint != self.fingerprint:
            raise SnapshotError(
                "machine",
                f"this snapshot belongs to machine {other.id!r} "
                f"(fingerprint {other.fingerprint}), not {self.id!r}",
            )

    def matches(self, configuration: Configuration, value: Any) -> bool:
        """True when ``configuration`` is in ``value`` (a dotted path or a state value)."""
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


def _ZERO() -> int:
    return 0


def fixed_clock(now: int | None) -> Callable[[], int]:
    """A clock function that always says ``now`` (epoch ms; 0 when None): what the pure
    calls (``transition``, ``start``, ``fire_timer``) give ``step`` and its kin."""
    if now is None:
        return _ZERO
    moment = int(now)
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


def create_machine(
    config: Mapping[str, Any],
    *,
    guards: Mapping[str, Any] | None = None,
    actions: Mapping[str, Any] | None = None,
    actors: Mapping[str, Any] | None = None,
    delays: Mapping[str, Any] | None = None,
    version: str | None = None,
    migrations: Mapping[str, Migration] | None = None,
) -> Machine:
    """Validate ``config`` (XState v5 keys) and build a machine, or raise
    ``MachineDefinitionError`` listing every problem with its path."""
    return Machine(
        config,
        Implementations(guards or {}, actions or {}, actors or {}, delays or {}),
        version,
        migrations,
    )


class Setup:
    """Implementations bound once, for several machines (XState's ``setup``)."""

    def __init__(self, implementations: Implementations) -> None:
        self.implementations = implementations

    def create_machine(
        self,
        config: Mapping[str, Any],
        *,
        version: str | None = None,
        migrations: Mapping[str, Migration] | None = None,
    ) -> Machine:
        """A machine using these implementations."""
        return Machine(config, self.implementations, version, migrations)


def setup(
    *,
    guards: Mapping[str, Any] | None = None,
    actions: Mapping[str, Any] | None = None,
    actors: Mapping[str, Any] | None = None,
    delays: Mapping[str, Any] | None = None,
) -> Setup:
    """``setup(guards=..., actions=..., actors=..., delays=...).create_machine(config)``."""
    return Setup(Implementations(guards or {}, actions or {}, actors or {}, delays or {}))
