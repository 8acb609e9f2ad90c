"""Looking at what a snapshot could do next, without doing it (XState's ``getNextTransitions``
and its microstep API).

Both read the pure core and change nothing: ``next_transitions`` lists the transitions of the
active states; ``microsteps`` runs one event and reports each microstep the macrostep took.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .events import EventLike, normalize_event
from .machine import Machine, fixed_clock
from .nodes import Transition
from .snapshot import Snapshot


def next_transitions(snapshot: Snapshot) -> tuple[Transition, ...]:
    """Every transition of the active states (XState's ``getNextTransitions``): innermost
    states first, each state's in document order, eventless (``always``) ones last with
    ``event`` None. Guards are not evaluated: a transition listed may be disabled by its guard
    (use ``snapshot.can(event)`` to ask whether an event would do something now). Empty when
    the machine is not active."""
    if snapshot.status != "active":
        return ()
    nodes = sorted(snapshot.configuration.node_set, key=lambda n: (-len(n.path), n.order))
    return tuple(t for node in nodes for t in (*node.transitions, *node.always))


def next_events(snapshot: Snapshot) -> tuple[str, ...]:
    """The event descriptors the active states handle (``*`` and ``prefix.*`` as written),
    sorted; the engine's own ``xstate.*`` events included."""
    return tuple(sorted({t.event for t in next_transitions(snapshot) if t.event is not None}))


@dataclass(frozen=True, slots=True)
class Microstep:
    """One microstep of a macrostep: the event it processed (``event`` is the external
    event, an internal one from ``raise_`` or a done event, or for an eventless microstep the
    event seen last) and the transitions it took, as ``(source id, target ids)``."""

    event: Any
    transitions: tuple[tuple[str, tuple[str, ...]], ...]


def microsteps(
    snapshot: Snapshot, event: EventLike, now: int | None = None
) -> tuple[tuple[Microstep, ...], Snapshot]:
    """Run ``event`` through the pure core, as ``machine.transition`` does, and return the
    microsteps it took along with the resulting snapshot (effects are not run)."""
    trace: list[Any] = []
    machine = snapshot.machine
    assert isinstance(machine, Machine)  # the owner of every snapshot the engine makes
    result, _ = machine.step(snapshot, normalize_event(event), fixed_clock(now), trace)
    steps = tuple(
        Microstep(ev, tuple((t.source.id, tuple(n.id for n in t.targets)) for t in taken))
        for ev, taken in trace
    )
    return steps, result
