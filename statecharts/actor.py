"""The in-memory actor runtime: it runs what the pure core decides.

An ``Actor`` holds the current snapshot, feeds events to ``machine.step`` one at a time
(taking a compiled route itself, as ``Machine.transition`` does, while ``step`` is the engine's
own; run-to-completion: events sent while one is processed wait in the mailbox), and executes the
returned effects: user actions in order, timers on its clock, child actors, sends and emits.

Thread safety: ``send``, ``stop`` and timer callbacks take the actor's lock, so an actor may be
fed from several threads (``SystemClock`` fires timers on its own thread); snapshots are
immutable and safe to share. Observers and actions run on whichever thread is processing.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from . import effects as fx
from .clock import Clock, SimulatedClock, SystemClock, TimerHandle
from .effects import RunAction
from .errors import (
    ActorStoppedError,
    ContextError,
    ImplementationError,
    StatechartError,
    SystemIdTakenError,
)
from .events import (
    EventLike,
    done_actor_event_type,
    error_actor_event_type,
    interned_event,
    normalize_event,
    snapshot_actor_event_type,
)
from .frozen import FrozenDict, freeze, thaw
from .idempotency import KEY_LENGTH, idempotency_key
from .inspection import InspectionEvent, Inspector
from .logic import AsyncLogic, CallableLogic, CallbackLogic, error_to_json, from_callable
from .machine import Machine
from .routes import take
from .snapshot import ChildRef, Snapshot, finished_child

logger = logging.getLogger("statecharts")
UNPERSISTABLE_RULES = ("restart", "fail")
_default_clock: SystemClock | None = None


def default_clock() -> SystemClock:
    """The process-wide wall clock actors use unless given one."""
    global _default_clock
    if _default_clock is None:
        _default_clock = SystemClock()
    return _default_clock


class Subscription:
    """Returned by ``subscribe``; ``unsubscribe()`` stops the notifications."""

    def __init__(self, observers: list[Any], observer: Any) -> None:
        self._observers = observers
        self._observer = observer

    def unsubscribe(self) -> None:
        """Stop notifying this observer."""
        if self._observer in self._observers:
            self._observers.remove(self._observer)


class ActorSystem:
    """The actors of one tree, by ``systemId``: any actor of the tree reaches any of them by
    that name (XState's ``system.get``), and a name is held by one actor at a time."""

    def __init__(self) -> None:
        self.actors: dict[str, Any] = {}

    def get(self, system_id: str) -> Any:
        """The actor registered as ``system_id``, or None."""
        return self.actors.get(system_id)

    def register(self, system_id: str, actor: Any) -> None:
        """Register ``actor`` as ``system_id``; ``SystemIdTakenError`` naming both actors if
        another one holds it (as XState refuses a second actor with one system ID)."""
        holder = self.actors.get(system_id)
        if holder is not None and holder is not actor:
            raise SystemIdTakenError(system_id, f"actor {holder.id!r}", f"actor {actor.id!r}")
        self.actors[system_id] = actor

    def unregister(self, system_id: str | None, actor: Any) -> None:
        """Free ``system_id`` if ``actor`` holds it (it stopped)."""
        if system_id and self.actors.get(system_id) is actor:
            del self.actors[system_id]


class Actor:
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
                        result = take(previous, normalized, kind, None)
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
            if _running(self._snapshot.children.get(payload[0])):  # else stopped or finished
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

    # -- effects -----------------------------------------------------------------------------

    def _run_effects(self, effects: tuple[fx.Effect, ...]) -> None:
        inspect = self._inspect
        for effect in effects:  # (no ``enumerate``: only a held send needs its place)
            if inspect is not None:
                self._report("@xstate.action", action=effect)
            if type(effect) is RunAction:  # the commonest effect, run without a dispatch
                fn: Any = effect.fn  # callable: the definition checked it
                if fn is None:  # an action looked up by name (not built by this machine)
                    fn = self.machine.implementations.actions.get(effect.type)
                    if not callable(fn):
                        continue
                try:
                    if effect.params:
                        fn(effect.context, effect.event, **effect.params)
                    else:
                        fn(effect.context, effect.event)
                except Exception as exc:
                    raise ImplementationError(f"action '{effect.type}'", exc) from exc
                continue
            if isinstance(effect, fx.SendTo) and self._hold(effect, effects):
                continue
            self._run_effect(effect)
            if self._held and isinstance(effect, fx.StartChild):
                for name in (effect.id, effect.system_id):
                    for event in self._held.pop(name or "", ()):
                        self._send_to(effect.id, event)

    def _hold(self, send: fx.SendTo, effects: tuple[fx.Effect, ...]) -> bool:
        """Hold a send to a child this step starts later (an entry action sending to the
        state's own invocation): XState delivers it once the child has started."""
        target = send.target
        if target in self._children or self.system.get(target) is not None:
            return False
        index = next(i for i, e in enumerate(effects) if e is send)  # not ``==``: alike sends
        if not any(
            isinstance(e, fx.StartChild) and target in (e.id, e.system_id)
            for e in effects[index + 1 :]
        ):
            return False
        self._held.setdefault(target, []).append(send.event)
        return True

    def _run_effect(self, effect: fx.Effect) -> None:
        """Any effect but ``RunAction`` (which ``_run_effects`` runs itself)."""
        if isinstance(effect, fx.StartTimer):
            self._arm(effect.id, effect.due_at)
        elif isinstance(effect, fx.CancelTimer):
            handle = self._timers.pop(effect.id, None)
            if handle is not None:
                self.clock.cancel(handle)
        elif isinstance(effect, fx.StartChild):
            self._start_child(
                effect.id,
                effect.src,
                effect.logic,
                effect.input,
                effect.system_id,
                None,
                effect.key,
                effect.sync_snapshot or self._wants_snapshots(effect.invoked_by, effect.id),
            )
        elif isinstance(effect, fx.StopChild):
            child = self._children.pop(effect.id, None)
            if child is not None:
                self._stop_child(child)
        elif isinstance(effect, fx.SendTo):
            self._send_to(effect.target, effect.event)
        elif isinstance(effect, fx.SendParent):
            if self.parent is None:
                logger.warning(
                    "actor %r has no parent to send %r to", self.id, effect.event["type"]
                )
            else:
                self.parent._deliver("event", effect.event)
        elif isinstance(effect, fx.Emit):
            for listener in (
                *self._listeners.get(effect.event["type"], ()),
                *self._listeners.get("*", ()),
            ):
                listener(effect.event)
        elif isinstance(effect, fx.Log):
            logger.info("%s%s", f"{effect.label}: " if effect.label else "", thaw(effect.value))

    def _arm(self, timer_id: str, due_at: int) -> None:
        old = self._timers.pop(timer_id, None)
        if old is not None:
            self.clock.cancel(old)
        self._timers[timer_id] = self.clock.schedule(
            due_at, lambda: self._deliver("timer", timer_id)
        )

    def _send_to(self, target: str, event: FrozenDict) -> None:
        actor = self._children.get(target) or self.system.get(target)
        if actor is None:
            logger.warning(
                "actor %r: no child or system actor %r to send %r to (dropped)",
                self.id,
                target,
                event["type"],
            )
            return
        actor._deliver("event", event) if isinstance(actor, Actor) else actor.send(event)

    # -- children ----------------------------------------------------------------------------

    def _start_child(
        self,
        child_id: str,
        src: str,
        logic: Any,
        input: Any,
        system_id: str | None,
        restored: Any,
        key: str | None = None,
        sync_snapshot: bool = False,
    ) -> None:
        if isinstance(logic, Machine):
            child: Any = Actor(
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
            if sync_snapshot:
                child.sync_snapshot = True
                child.subscribe(
                    lambda snap: self._deliver("child", (child_id, _snapshot_event(child_id, snap)))
                )
        elif isinstance(logic, CallbackLogic):
            child = CallbackChild(self, child_id, logic, input)
        elif isinstance(logic, CallableLogic | AsyncLogic):
            child = self._function_child(child_id, logic, input, key)
        elif callable(logic):
            child = self._function_child(child_id, from_callable(logic, src), input, key)
        else:
            raise ImplementationError(
                f"actor {src!r}",
                TypeError(
                    f"{logic!r} is not actor logic (a machine, from_callable, from_async or "
                    "from_callback)"
                ),
            )
        if system_id:
            try:
                self.system.register(system_id, child)
            except SystemIdTakenError as exc:
                raise ImplementationError(f"actor {src!r}", exc) from exc
            child.system_id = system_id
        self._children[child_id] = child
        child.start()

    def _stop_child(self, child: Any) -> None:
        """Stop ``child`` and free its systemId (a machine child frees its own)."""
        child.stop()
        self.system.unregister(getattr(child, "system_id", None), child)

    def _wants_snapshots(self, invoked_by: str | None, child_id: str) -> bool:
        """An invoked child reports its snapshots when the machine handles them (its invoke
        has ``onSnapshot``); a spawned one only with ``sync_snapshot=True``."""
        if invoked_by is None:
            return False
        event_type = snapshot_actor_event_type(child_id)
        found = self._handled.get(event_type)
        if found is None:
            found = self._handled[event_type] = any(
                t.event == event_type for n in self.machine.definition.nodes for t in n.transitions
            )
        return found

    @property
    def session_id(self) -> str:
        """This actor's session (XState's ``sessionId``): unique per actor object (random), so
        two actors of one machine never hand a call the same idempotency key."""
        if self._session_id is None:
            self._session_id = uuid.uuid4().hex
        return self._session_id

    def call_key(self, child_id: str, retry_key: str | None) -> str:
        """The idempotency key of a call this actor starts: a retried call's record key (the
        same for all its attempts), else this call's number in the session; in the form and
        length of ``statecharts.idempotency`` (the invoke's ``keyLength``)."""
        self._calls += 1
        length = next(
            (
                i.key_length
                for n in self.machine.definition.nodes
                for i in n.invoke
                if i.id == child_id
            ),
            KEY_LENGTH,
        )
        return idempotency_key(self.session_id, retry_key or f"{child_id}#{self._calls}", length)

    def _function_child(
        self, child_id: str, logic: Any, input: Any, key: str | None
    ) -> FunctionChild:
        return FunctionChild(self, child_id, logic, input, key)

    def child_done(self, child_id: str, output: Any) -> None:
        """A child finished with ``output`` (children call this)."""
        try:
            frozen = freeze(output, f"output of child {child_id!r}")
        except ContextError as exc:
            self.child_failed(child_id, error_to_json(exc))
            return
        self._deliver(
            "child", (child_id, FrozenDict(type=done_actor_event_type(child_id), output=frozen))
        )

    def child_failed(self, child_id: str, error: Any) -> None:
        """A child failed with ``error`` (JSON) (children call this)."""
        self._deliver(
            "child",
            (
                child_id,
                FrozenDict(type=error_actor_event_type(child_id), error=freeze(error, "error")),
            ),
        )

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
            if _running(ref):
                self._resume_child(ref)
        now = self.clock.now()
        for timer in snapshot.timers:  # due order; overdue ones fire at once, in order
            if timer.due_at <= now:
                self._queue("timer", timer.id)
            else:
                self._arm(timer.id, timer.due_at)

    def _resume_child(self, ref: ChildRef) -> None:
        logic = self._logic_of(ref)
        state = ref.state if isinstance(ref.state, Mapping) else {}
        if isinstance(logic, Machine) and state.get("snapshot") is not None:
            self._start_child(
                ref.id,
                ref.src,
                logic,
                ref.input,
                ref.system_id,
                state["snapshot"],
                None,
                state.get("sync_snapshot") is True or self._wants_snapshots(ref.invoked_by, ref.id),
            )
        elif self.on_unpersistable == "restart":
            self._start_child(ref.id, ref.src, logic, ref.input, ref.system_id, None)
        else:
            self._queue(
                "child",
                (
                    ref.id,
                    FrozenDict(
                        type=error_actor_event_type(ref.id),
                        error={
                            "name": "ActorLost",
                            "message": f"child {ref.id!r} was running when "
                            "the snapshot was taken and cannot be resumed",
                        },
                    ),
                ),
            )

    def _logic_of(self, ref: ChildRef) -> Any:
        if ref.invoked_by is not None:
            node = self.machine.definition.by_id.get(ref.invoked_by)
            for invoke in node.invoke if node is not None else ():
                if invoke.id == ref.id and invoke.logic is not None:
                    return invoke.logic
        return self.machine.resolve_actor(ref.src)[1]

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
            if child is not None and _running(self.get_snapshot().children.get(child_id)):
                record["state"] = child.persisted_state()
        return data

    def persisted_state(self) -> dict[str, Any]:
        """What a parent records about this actor when persisting."""
        state: dict[str, Any] = {"kind": "machine", "snapshot": self.get_persisted_snapshot()}
        if self.sync_snapshot:
            state["sync_snapshot"] = True
        return state

    def subscribe(
        self,
        observer: Callable[[Snapshot], Any] | None = None,
        *,
        error: Callable[[BaseException], Any] | None = None,
        complete: Callable[[], Any] | None = None,
    ) -> Subscription:
        """Call ``observer(snapshot)`` on each change, ``error(exc)`` on failure and
        ``complete()`` when the actor stops."""
        entry = (observer, error, complete)
        self._observers.append(entry)
        return Subscription(self._observers, entry)

    def on(self, event_type: str, listener: Callable[[Any], None]) -> Subscription:
        """Listen to events the machine ``emit``s (``*`` for all)."""
        listeners = self._listeners.setdefault(event_type, [])
        listeners.append(listener)
        return Subscription(listeners, listener)

    @property
    def status(self) -> str:
        """``idle`` (not started), ``running`` or ``stopped``."""
        return self._status

    @property
    def children(self) -> Mapping[str, Any]:
        """Child actors by id (a finished child stays until its state is exited)."""
        return dict(self._children)

    def _notify(self) -> None:
        snapshot = self._snapshot
        for observer, _, _ in list(self._observers):
            if observer is not None:
                observer(snapshot)

    def _report(self, kind: str, **fields: Any) -> None:
        if self._inspect is not None:
            self._inspect(InspectionEvent(kind, self.id, **fields))

    def _trace(self, trace: list[Any] | None) -> None:
        if trace and self._inspect is not None:
            for event, transitions in trace:
                self._report(
                    "@xstate.microstep",
                    event=event,
                    transitions=tuple(
                        (t.source.id, tuple(n.id for n in t.targets)) for t in transitions
                    ),
                )

    def __repr__(self) -> str:
        return f"<Actor {self.id!r} {self._status}>"


class FunctionChild:
    """A child running a function (``from_callable``) or coroutine (``from_async``) once."""

    def __init__(
        self,
        parent: Actor,
        child_id: str,
        logic: CallableLogic | AsyncLogic,
        input: Any,
        key: str | None = None,
    ) -> None:
        self.parent = parent
        self.id = child_id
        self.key = key  # a retried call's record key, else None
        self.logic = logic
        self.input = input
        self.running = False
        self.stopped = False
        self.system_id: str | None = None

    def start(self) -> None:
        """Run the function to completion now and report its result to the parent."""
        self.running = True
        kwargs = (
            {"idempotency_key": self.parent.call_key(self.id, self.key)}
            if self.logic.wants_key
            else {}
        )
        try:
            if isinstance(self.logic, AsyncLogic):
                output = asyncio.run(_await(self.logic.fn(thaw(self.input), **kwargs)))
            else:
                output = self.logic.fn(thaw(self.input), **kwargs)
        except Exception as exc:
            self.running = False
            if not self.stopped:
                self.parent.child_failed(self.id, error_to_json(exc))
            return
        self.running = False
        if not self.stopped:
            self.parent.child_done(self.id, output)

    def send(self, event: Any) -> None:
        """Functions take no events; dropped with a warning."""
        logger.warning("child %r runs a function and takes no events (%r dropped)", self.id, event)

    def stop(self) -> None:
        """Forget the result if it has not arrived."""
        self.stopped = True

    def persisted_state(self) -> dict[str, Any]:
        """Functions cannot be persisted mid-flight: recorded with their input."""
        return {"kind": "function", "status": "running" if self.running else "idle"}


async def _await(awaitable: Any) -> Any:
    return await awaitable


class CallbackChild:
    """A child running ``fn(send_back, receive, input)`` until stopped."""

    def __init__(self, parent: Actor, child_id: str, logic: CallbackLogic, input: Any) -> None:
        self.parent = parent
        self.id = child_id
        self.logic = logic
        self.input = input
        self.handlers: list[Callable[[Any], None]] = []
        self.cleanup: Callable[[], Any] | None = None
        self.stopped = False
        self.system_id: str | None = None

    def start(self) -> None:
        """Call the callback function; keep its cleanup."""

        def send_back(event: EventLike) -> None:
            if not self.stopped:
                self.parent._deliver("event", normalize_event(event))

        try:
            result = self.logic.fn(send_back, self.handlers.append, thaw(self.input))
        except Exception as exc:
            self.parent.child_failed(self.id, error_to_json(exc))
            return
        self.cleanup = result if callable(result) else None

    def send(self, event: Any) -> None:
        """Pass ``event`` to the handlers registered through ``receive``."""
        for handler in list(self.handlers):
            handler(event)

    _deliver = None  # callbacks are not Actors; _send_to uses send()

    def stop(self) -> None:
        """Run the cleanup once."""
        if not self.stopped:
            self.stopped = True
            if self.cleanup is not None:
                self.cleanup()

    def persisted_state(self) -> dict[str, Any]:
        """Callbacks hold live resources: recorded with their input, restarted on resume."""
        return {"kind": "callback", "status": "running"}


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


def _snapshot_event(child_id: str, snapshot: Snapshot) -> FrozenDict:
    """``xstate.snapshot.<id>`` with the child's value, context, status, output and error."""
    return FrozenDict(
        type=snapshot_actor_event_type(child_id),
        snapshot=FrozenDict(
            value=snapshot.value,
            context=snapshot.context,
            status=snapshot.status,
            output=snapshot.output,
            error=snapshot.error,
        ),
    )


def _running(ref: ChildRef | None) -> bool:
    """A child record of a child that has not finished (see ``finished_child``)."""
    return ref is not None and not finished_child(ref)


def wait_for(
    actor: Actor, predicate: Callable[[Snapshot], bool], timeout: int | None = None
) -> Snapshot:
    """Wait until ``predicate(snapshot)`` holds; ``timeout`` in ms.

    With a ``SimulatedClock`` this advances simulated time timer by timer (never sleeping);
    with the system clock it blocks the calling thread. Raises ``TimeoutError``, or
    ``ActorStoppedError`` if the actor ends first without the predicate holding.
    """
    snapshot = actor.get_snapshot()
    if predicate(snapshot):
        return snapshot
    if isinstance(actor.clock, SimulatedClock):
        return _wait_simulated(actor, actor.clock, predicate, timeout)
    done = threading.Event()
    found: list[Snapshot] = []

    def check(snap: Snapshot) -> None:
        if predicate(snap):
            found.append(snap)
            done.set()

    subscription = actor.subscribe(check, complete=done.set)
    try:
        check(actor.get_snapshot())
        if not done.wait(None if timeout is None else timeout / 1000):
            raise TimeoutError(f"actor {actor.id!r}: condition not met within {timeout} ms")
    finally:
        subscription.unsubscribe()
    if found:
        return found[0]
    raise ActorStoppedError(f"actor {actor.id!r} stopped before the condition held")


def _wait_simulated(
    actor: Actor, clock: SimulatedClock, predicate: Callable[[Snapshot], bool], timeout: int | None
) -> Snapshot:
    deadline = None if timeout is None else clock.now() + timeout
    while True:
        snapshot = actor.get_snapshot()
        if predicate(snapshot):
            return snapshot
        if actor.status == "stopped":
            raise ActorStoppedError(f"actor {actor.id!r} stopped before the condition held")
        next_due = min((h.due_at for h in clock._heap if not h.cancelled), default=None)
        if next_due is None or (deadline is not None and next_due > deadline):
            if deadline is not None:
                clock.set(max(deadline, clock.now()))
                if predicate(actor.get_snapshot()):
                    return actor.get_snapshot()
            raise TimeoutError(
                f"actor {actor.id!r}: condition not met within {timeout} ms of simulated time"
            )
        clock.set(max(next_due, clock.now()))
