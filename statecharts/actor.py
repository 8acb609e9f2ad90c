"""The in-memory actor runtime: it runs what the pure core decides.

An ``Actor`` holds the current snapshot, feeds events to ``machine.step`` one at a time
(taking a compiled route itself, as ``Machine.transition`` does, while ``step`` is the engine's
own; run-to-completion: events sent while one is processed wait in the mailbox), and executes the
returned effects: user actions in order, timers on its clock, child actors, sends and emits.

This module is the actor's run-to-completion core (lifecycle, mailbox, steps, resume, persisted
snapshots); the rest of ``Actor`` comes from one module per part: ``actor_effects`` (running
the effects), ``actor_children`` (child actors), ``actor_observers`` (subscribers, emitted-event
listeners, the inspector). ``ActorSystem``, the children and ``wait_for`` are importable here
as before.

Thread safety: ``send``, ``stop`` and timer callbacks take the actor's lock, so an actor may be
fed from several threads (``SystemClock`` fires timers on its own thread); snapshots are
immutable and safe to share. Observers and actions run on whichever thread is processing.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from . import effects as fx
from .actor_children import ActorChildren, CallbackChild, FunctionChild, running
from .actor_effects import ActorEffects
from .actor_observers import ActorObservers, Subscription
from .actor_system import ActorSystem
from .clock import Clock, SystemClock, TimerHandle
from .errors import ActorStoppedError, ImplementationError, StatechartError
from .events import EventLike, interned_event, normalize_event
from .frozen import FrozenDict
from .inspection import Inspector
from .logic import error_to_json
from .machine import Machine
from .routes import take
from .snapshot import Snapshot
from .waiting import wait_for

__all__ = [
    "Actor",
    "ActorSystem",
    "CallbackChild",
    "FunctionChild",
    "Subscription",
    "create_actor",
    "default_clock",
    "wait_for",
]

logger = logging.getLogger("statecharts")
UNPERSISTABLE_RULES = ("restart", "fail")
_default_clock: SystemClock | None = None


def default_clock() -> SystemClock:
    """The process-wide wall clock actors use unless given one."""
    global _default_clock
    if _default_clock is None:
        _default_clock = SystemClock()
    return _default_clock


class Actor(ActorEffects, ActorChildren, ActorObservers):
    """A running machine. Create with ``create_actor``; call ``start()`` before sending."""

    def __init__(
        self,
        machine: Machine,
        *,
        input: Any = None,
        snapshot: Snapshot | Mapping[str, Any] | bytes | None = None,
        clock: Clock | None = None,
        inspect: Inspector | None = None,
        id: str | None = None,
        parent: Any = None,
        system: ActorSystem | None = None,
        system_id: str | None = None,
        on_unpersistable: str = "restart",
        strict: bool = False,
    ) -> None:
        if on_unpersistable not in UNPERSISTABLE_RULES:
            raise ValueError(f"on_unpersistable is one of {UNPERSISTABLE_RULES}")
        self.machine = machine
        self.id = id or machine.id
        self._session_id: str | None = None  # made when first asked for (see session_id)
        self._calls = 0  # calls started in this session (keys of calls without a retry record)
        self.clock: Clock = clock or default_clock()
        self.system = system or ActorSystem()
        self.system_id = system_id
        self.parent = parent
        self.on_unpersistable = on_unpersistable
        self.strict = strict
        self.sync_snapshot = False  # this child reports each snapshot to its parent
        self._handled: dict[str, bool] = {}
        """Raise ``ActorStoppedError`` for an event sent once the actor has ended, instead of
        dropping it with a warning and a ``@statecharts.dropped`` inspection record."""
        self._inspect = inspect
        self._input = input
        self._restore_from = snapshot
        self._snapshot: Snapshot | None = None
        self._status = "idle"
        # made when the first delivery waits (an actor that never queues one keeps none: an
        # empty deque is a third of an idle actor's memory)
        self._mailbox: deque[tuple[str, Any]] | None = None
        self._processing = False
        self._lock = threading.RLock()
        self._observers: list[
            tuple[Callable[..., Any] | None, Callable[..., Any] | None, Callable[..., Any] | None]
        ] = []
        self._listeners: dict[str, list[Callable[[Any], None]]] = {}
        self._timers: dict[str, TimerHandle] = {}
        self._children: dict[str, Any] = {}
        # sends from this step's actions to a child that a later effect of the step starts
        # (XState delivers them once the child has started)
        self._held: dict[str, list[FrozenDict]] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Actor:
        """Start (or resume from the given snapshot); returns the actor."""
        with self._lock:
            if self._status != "idle":
                return self
            self._status = "running"
            if self.system_id:
                self.system.register(self.system_id, self)
            self._report("@xstate.actor")
            # events that children send while the initial effects run wait in the mailbox
            self._processing = True
            try:
                if self._restore_from is not None:
                    self._resume(self._restore_from)
                else:
                    self._step(_start_machine, self._input, None)
            except StatechartError as exc:
                if self.parent is None:
                    raise
                self._fail_to_parent(exc)
            finally:
                self._processing = False
            self._drain()
        return self

    def _fail_to_parent(self, exc: StatechartError) -> None:
        """A child that fails while starting reports it to its parent (which may take
        ``onError``), as XState does, instead of breaking the parent's own step."""
        if self._snapshot is not None:
            self._fail(exc)
        if self._status != "stopped":  # failed before it had a snapshot
            self.parent.child_failed(self.id, error_to_json(exc))
            self._shutdown()

    def stop(self) -> None:
        """Stop: children stopped, timers cancelled, status ``stopped``. Idempotent."""
        with self._lock:
            if self._status == "stopped":
                return
            if self._snapshot is not None and self._snapshot.status == "active":
                snapshot, effects = self.machine.stop(self._snapshot)
                self._snapshot = snapshot
                self._run_effects(effects)
            self._shutdown()
            self._notify()

    def _shutdown(self) -> None:
        self._status = "stopped"
        for handle in self._timers.values():
            self.clock.cancel(handle)
        self._timers.clear()
        for child in list(self._children.values()):
            self._stop_child(child)
        self._children.clear()
        self._mailbox = None
        self.system.unregister(self.system_id, self)
        self._report("@xstate.stopped")
        for _, _, complete in list(self._observers):
            if complete is not None:
                complete()

    # -- events ------------------------------------------------------------------------------

    def send(self, event: EventLike) -> None:
        """Send an event. Events sent while one is processed wait their turn.

        An event sent once the actor has ended (done, failed or stopped) is dropped, as in
        XState: a warning is logged and inspection gets ``@statecharts.dropped``. With
        ``strict=True`` it raises ``ActorStoppedError`` instead.
        """
        # normalize_event's two fast cases first, without its call (as Machine.transition);
        # ``kind`` is the event's type
        if type(event) is str:
            kind: Any = event
            normalized = interned_event(event)
        elif type(event) is FrozenDict and type(kind := event.get("type")) is str:
            normalized = event
        else:
            normalized = None
        if normalized is None:
            normalized = normalize_event(event)
            kind = normalized["type"]
        lock = self._lock
        lock.acquire()  # not ``with``: its special-method calls cost a tenth of a step
        try:
            if self._status != "running" or self._processing or self._mailbox:
                if self._status == "stopped":
                    self._drop(normalized)
                    return
                self._queue("event", normalized)
                if self._status == "running":
                    self._drain()
                return
            # at rest: process this event now, then whatever it caused to be queued
            self._processing = True
            try:
                previous: Any = self._snapshot  # (a running actor has one)
                machine = self.machine
                # the event's compiled route (``routes.take``), taken here as
                # ``Machine.transition`` takes it, while nothing asks for more than a route gives:
                # no inspector (it wants the microsteps), the engine's own ``step`` (a
                # subclass's, or a patch such as the test kit's coverage, sees every event:
                # looked up now), plans on, the snapshot this machine's and active; else ``_step``
                if (
                    self._inspect is not None
                    or previous.machine is not machine
                    or previous.status != "active"
                    or not machine.plans
                    or type(machine).step is not _MACHINE_STEP
                ):
                    self._step(
                        None,
                        normalized,
                        None if self._inspect is None else self._event_trace(normalized),
                    )
                else:
                    try:
                        result = previous.configuration.routes.get(kind, take)(
                            previous, previous.context, normalized, None, None
                        )
                    except StatechartError as exc:
                        if self._failed(exc, previous):
                            raise
                    else:
                        if result is None:  # no route, or it hands this event to the full step
                            self._step(_full_step, normalized, None)
                        elif self._observers:
                            self._settle(previous, result[0], result[1], None)
                        else:
                            # ``_settle`` with no one to tell: a route leaves the status active
                            snapshot, effects = result
                            self._snapshot = snapshot
                            if effects:
                                try:
                                    self._run_effects(effects)
                                except ImplementationError as exc:
                                    if self._effects_failed(previous, exc):
                                        raise
            finally:
                self._processing = False
            if self._mailbox:
                self._drain()
        finally:
            lock.release()

    def _drop(self, event: FrozenDict) -> None:
        ended = self._snapshot.status if self._snapshot is not None else "stopped"
        message = f"actor {self.id!r} has ended ({ended}); it cannot receive {event['type']!r}"
        if self.strict:
            raise ActorStoppedError(message)
        logger.warning("%s (dropped)", message)
        self._report("@statecharts.dropped", event=event)

    def _deliver(self, kind: str, payload: Any) -> None:
        """Queue an internal delivery (timer, child result) unless stopped."""
        with self._lock:
            if self._status != "running":
                return
            self._queue(kind, payload)
            self._drain()

    def _queue(self, kind: str, payload: Any) -> None:
        mailbox = self._mailbox
        if mailbox is None:
            mailbox = self._mailbox = deque()
        mailbox.append((kind, payload))

    def _drain(self) -> None:
        if self._processing:
            return
        self._processing = True
        try:
            while self._mailbox and self._status == "running":
                kind, payload = self._mailbox.popleft()
                self._process(kind, payload)
        finally:
            self._processing = False

    def _process(self, kind: str, payload: Any) -> None:
        if kind == "event":
            self._process_event(payload)
        elif kind == "child":
            assert self._snapshot is not None
            if running(self._snapshot.children.get(payload[0])):  # else stopped or finished
                self._process_event(payload[1])
        else:
            self._process_timer(payload)

    def _process_timer(self, timer_id: str) -> None:
        self._timers.pop(timer_id, None)
        self._step(
            type(self.machine).deliver_timer, timer_id, [] if self._inspect is not None else None
        )

    def _process_event(self, event: FrozenDict) -> None:
        """A queued event through the machine (``send`` takes one at rest itself)."""
        self._step(None, event, None if self._inspect is None else self._event_trace(event))

    def _event_trace(self, event: FrozenDict) -> list[Any]:
        """Report an event to the inspector; the list its microsteps are traced into."""
        self._report("@xstate.event", event=event)
        return []

    def _step(self, step: Callable[..., Any] | None, item: Any, trace: list[Any] | None) -> None:
        """``step(machine, snapshot, item, now, trace)`` on the current snapshot (or the start,
        before there is one), then its result settled (``_settle``). ``step`` is a function,
        not a method bound per item: ``Machine.deliver_timer``, ``_start_machine``,
        ``_full_step``, or None for the machine's class's ``step``, looked up now (a subclass's
        or a patch's sees every event); ``send`` takes compiled routes itself."""
        previous: Any = self._snapshot  # (None only for the start, which passes ``step``)
        machine = self.machine
        try:
            snapshot, effects = (type(machine).step if step is None else step)(
                machine, previous, item, self.clock.now, trace
            )
        except StatechartError as exc:
            if self._failed(exc, previous):
                raise
            return
        self._settle(previous, snapshot, effects, trace)

    def _failed(self, exc: StatechartError, previous: Snapshot | None) -> bool:
        """A step raised ``exc``: the actor fails. True when the sender is to see it (a
        child's failure goes to its parent as an event instead; a child failing as it starts
        raises: ``start`` tells its parent)."""
        self._fail(exc)
        return self.parent is None or previous is None

    def _settle(
        self,
        previous: Snapshot | None,
        snapshot: Snapshot,
        effects: tuple[fx.Effect, ...],
        trace: list[Any] | None,
    ) -> None:
        """A step's result applied: the new snapshot kept, its effects run, observers told,
        the actor finished if the machine is (a failing implementation fails it)."""
        if trace:
            self._trace(trace)
        if effects:
            self._snapshot = snapshot
            try:
                self._run_effects(effects)
            except ImplementationError as exc:
                if self._effects_failed(previous, exc):
                    raise
                return
            snapshot = self._snapshot  # as the effects left it
        elif snapshot is previous:
            return  # nothing happened: nothing to tell
        else:
            self._snapshot = snapshot
        if snapshot is not previous:
            if self._inspect is not None:
                self._report("@xstate.snapshot", snapshot=snapshot)
            if self._observers:
                self._notify()
        if snapshot.status != "active" and snapshot.status in ("done", "error"):
            self._finish()

    def _effects_failed(self, previous: Snapshot | None, exc: ImplementationError) -> bool:
        """An action of a step raised: the actor fails, its errored snapshot keeping the state
        the step started from (as XState's). True when the sender is to see it."""
        if previous is not None:
            self._snapshot = previous
        self._fail(exc)
        return self.parent is None

    def _finish(self) -> None:
        snapshot = self._snapshot
        assert snapshot is not None
        if self.parent is not None:
            if snapshot.status == "done":
                self.parent.child_done(self.id, snapshot.output)
            else:
                self.parent.child_failed(self.id, snapshot.error)
        self._shutdown()

    def _fail(self, exc: BaseException) -> None:
        if self._snapshot is None or self._snapshot.status != "active":
            return
        snapshot, effects = self.machine.fail(self._snapshot, error_to_json(exc))
        self._snapshot = snapshot
        try:
            self._run_effects(effects)
        finally:
            for _, error, _ in list(self._observers):
                if error is not None:
                    error(exc)
            self._notify()
            self._finish()

    # -- resuming ----------------------------------------------------------------------------

    def _resume(self, data: Snapshot | Mapping[str, Any] | bytes) -> None:
        snapshot = data if isinstance(data, Snapshot) else self.machine.restore(data)
        self._snapshot = snapshot
        for ref in snapshot.children.values():
            if running(ref):
                self._resume_child(ref)
        now = self.clock.now()
        for timer in snapshot.timers:  # due order; overdue ones fire at once, in order
            if timer.due_at <= now:
                self._queue("timer", timer.id)
            else:
                self._arm(timer.id, timer.due_at)

    # -- observing ---------------------------------------------------------------------------

    def get_snapshot(self) -> Snapshot:
        """The current snapshot."""
        if self._snapshot is None:
            raise ActorStoppedError(f"actor {self.id!r} has not started")
        return self._snapshot

    def get_persisted_snapshot(self) -> dict[str, Any]:
        """The snapshot as JSON types, children included (recursively)."""
        data = self.machine.persist(self.get_snapshot())
        for child_id, record in data["children"].items():
            child = self._children.get(child_id)
            if child is not None and running(self.get_snapshot().children.get(child_id)):
                record["state"] = child.persisted_state()
        return data

    def persisted_state(self) -> dict[str, Any]:
        """What a parent records about this actor when persisting."""
        state: dict[str, Any] = {"kind": "machine", "snapshot": self.get_persisted_snapshot()}
        if self.sync_snapshot:
            state["sync_snapshot"] = True
        return state

    @property
    def status(self) -> str:
        """``idle`` (not started), ``running`` or ``stopped``."""
        return self._status

    @property
    def children(self) -> Mapping[str, Any]:
        """Child actors by id (a finished child stays until its state is exited)."""
        return dict(self._children)

    def __repr__(self) -> str:
        return f"<Actor {self.id!r} {self._status}>"

    def _machine_child(
        self,
        logic: Machine,
        child_id: str,
        input: Any,
        restored: Any,
        system_id: str | None,
    ) -> Actor:
        """A machine's child actor (``ActorChildren._start_child`` starts it)."""
        return Actor(
            logic,
            input=input,
            snapshot=restored,
            clock=self.clock,
            inspect=self._inspect,
            id=child_id,
            parent=self,
            system=self.system,
            system_id=system_id,
            on_unpersistable=self.on_unpersistable,
        )


def create_actor(
    machine: Machine,
    *,
    input: Any = None,
    snapshot: Snapshot | Mapping[str, Any] | bytes | None = None,
    clock: Clock | None = None,
    inspect: Inspector | None = None,
    on_unpersistable: str = "restart",
    system_id: str | None = None,
    strict: bool = False,
) -> Actor:
    """An actor for ``machine``; pass ``snapshot`` to resume a persisted one.

    ``on_unpersistable`` says what happens on resume to a child that was running and could not
    be persisted (a function in flight, a callback): ``restart`` it with its input, or ``fail``
    it (the parent receives ``xstate.error.actor.<id>`` with ``ActorLost``).
    ``strict=True`` makes ``send`` to an actor that has ended raise ``ActorStoppedError``
    (by default the event is dropped with a warning, as in XState).
    """
    return Actor(
        machine,
        input=input,
        snapshot=snapshot,
        clock=clock,
        inspect=inspect,
        on_unpersistable=on_unpersistable,
        system_id=system_id,
        strict=strict,
    )


_MACHINE_STEP = Machine.step


def _full_step(
    machine: Machine,
    snapshot: Snapshot,
    event: FrozenDict,
    now: Callable[[], int],
    trace: list[Any] | None,
) -> tuple[Snapshot, tuple[fx.Effect, ...]]:
    """The full step (``Machine._macrostep``) of an event whose compiled route handed it over,
    in the form ``Actor._step`` calls."""
    return machine._macrostep(snapshot, event, now, trace)


def _start_machine(
    machine: Machine, snapshot: None, input: Any, now: Callable[[], int], trace: None
) -> tuple[Snapshot, tuple[fx.Effect, ...]]:
    """``Machine.start`` in the form ``Actor._step`` calls."""
    return machine.start(input, now)
