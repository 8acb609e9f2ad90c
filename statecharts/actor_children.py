"""The children of an in-memory actor: starting them (machines, functions, callbacks),
stopping them, their results back to the parent as events, the idempotency keys of the calls
they make, restarting them on resume; and the children that are not machines
(``FunctionChild``, ``CallbackChild``)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from .actor_system import ActorSystem
from .clock import Clock
from .errors import ContextError, ImplementationError, SystemIdTakenError
from .events import (
    EventLike,
    done_actor_event_type,
    error_actor_event_type,
    normalize_event,
    snapshot_actor_event_type,
)
from .frozen import FrozenDict, freeze, thaw
from .idempotency import KEY_LENGTH, idempotency_key
from .logic import AsyncLogic, CallableLogic, CallbackLogic, error_to_json, from_callable
from .machine import Machine
from .snapshot import ChildRef, Snapshot, finished_child

logger = logging.getLogger("statecharts")


class ActorChildren:
    """The children half of ``Actor`` (see ``actor.Actor``, which sets these attributes and
    provides the methods declared here; ``_machine_child`` makes a machine's child actor)."""

    id: str
    machine: Machine
    clock: Clock
    system: ActorSystem
    on_unpersistable: str
    _session_id: str | None
    _calls: int
    _handled: dict[str, bool]
    _children: dict[str, Any]
    _deliver: Callable[[str, Any], None]
    _queue: Callable[[str, Any], None]
    _machine_child: Callable[..., Any]

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
            child: Any = self._machine_child(logic, child_id, input, restored, system_id)
            if sync_snapshot:
                child.sync_snapshot = True
                child.subscribe(
                    lambda snap: self._deliver("child", (child_id, snapshot_event(child_id, snap)))
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


class FunctionChild:
    """A child running a function (``from_callable``) or coroutine (``from_async``) once."""

    def __init__(
        self,
        parent: ActorChildren,
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
        kwargs = self.key_argument()
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

    def key_argument(self) -> dict[str, str]:
        """The function's keyword arguments: its idempotency key when it asks for one."""
        if not self.logic.wants_key:
            return {}
        return {"idempotency_key": self.parent.call_key(self.id, self.key)}

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

    def __init__(
        self, parent: ActorChildren, child_id: str, logic: CallbackLogic, input: Any
    ) -> None:
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


def snapshot_event(child_id: str, snapshot: Snapshot) -> FrozenDict:
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


def running(ref: ChildRef | None) -> bool:
    """A child record of a child that has not finished (see ``finished_child``)."""
    return ref is not None and not finished_child(ref)
