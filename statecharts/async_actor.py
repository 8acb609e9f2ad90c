"""The asyncio actor runtime: the same semantics as ``actor.Actor``, with invoked work running
concurrently on the event loop (coroutines as tasks, plain functions in worker threads) and
timers on the loop (``AsyncioClock``) or a ``SimulatedClock``.

Use it from a running event loop. ``send`` may be called from the loop's thread; from other
threads use ``loop.call_soon_threadsafe(actor.send, event)``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Mapping
from typing import Any

from .actor import Actor, FunctionChild, wait_for
from .clock import Clock, SimulatedClock, TimerHandle
from .errors import ActorStoppedError, CallTimeoutError
from .frozen import thaw
from .inspection import Inspector
from .logic import AsyncLogic, error_to_json
from .machine import Machine
from .snapshot import Snapshot


class AsyncioClock:
    """Wall-clock time with timers scheduled on the running asyncio loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop
        self._seq = itertools.count()
        self._pending: set[TimerHandle] = set()

    def now(self) -> int:
        """Epoch milliseconds."""
        return time.time_ns() // 1_000_000

    def schedule(self, due_at: int, callback: Callable[[], None]) -> TimerHandle:
        """Call ``callback`` on the loop at ``due_at``."""
        loop = self._loop or asyncio.get_running_loop()
        handle = TimerHandle(due_at, next(self._seq), callback)
        self._pending.add(handle)

        def fire() -> None:
            self._pending.discard(handle)
            if not handle.cancelled:
                handle.cancelled = True
                callback()

        loop.call_later(max(0.0, (due_at - self.now()) / 1000), fire)
        return handle

    def cancel(self, handle: TimerHandle) -> None:
        """Cancel ``handle``."""
        handle.cancelled = True
        self._pending.discard(handle)

    def pending(self) -> int:
        """How many timers are still scheduled."""
        return sum(1 for h in self._pending if not h.cancelled)


class AsyncActor(Actor):
    """An actor whose invoked functions and coroutines run concurrently on the loop."""

    def _function_child(
        self, child_id: str, logic: Any, input: Any, key: str | None
    ) -> FunctionChild:
        return TaskChild(self, child_id, logic, input, key)


class TaskChild(FunctionChild):
    """A function or coroutine child running as an asyncio task."""

    task: asyncio.Task[Any] | None = None

    def start(self) -> None:
        """Start the task; its result reaches the parent when it completes."""
        self.running = True
        kwargs = self.key_argument()
        argument = thaw(self.input)
        if isinstance(self.logic, AsyncLogic):
            work = self.logic.fn(argument, **kwargs)
        else:
            work = asyncio.to_thread(self.logic.fn, argument, **kwargs)
        timeout = _timeout_ms(self.parent.machine, self.id)
        if timeout is not None:
            work = _within(work, timeout, self.id)
        self.task = asyncio.ensure_future(work)
        self.task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self.running = False
        if self.stopped or task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self.parent.child_failed(self.id, error_to_json(error))
        else:
            self.parent.child_done(self.id, task.result())

    def stop(self) -> None:
        """Cancel the task if it is still running."""
        self.stopped = True
        if self.task is not None and not self.task.done():
            self.task.cancel()


def _timeout_ms(machine: Machine, child_id: str) -> int | None:
    """The ``timeout`` of the invoke that started child `child_id` (None: none, or spawned)."""
    for node in machine.definition.nodes:
        for invoke in node.invoke:
            if invoke.id == child_id:
                return invoke.timeout_ms
    return None


async def _within(work: Any, timeout_ms: int, child_id: str) -> Any:
    """`work`, failed with `CallTimeoutError` when it takes longer than `timeout_ms`."""
    try:
        return await asyncio.wait_for(work, timeout_ms / 1000)
    except TimeoutError:
        raise CallTimeoutError(f"invoke {child_id!r} took longer than {timeout_ms} ms") from None


def create_async_actor(
    machine: Machine,
    *,
    input: Any = None,
    snapshot: Snapshot | Mapping[str, Any] | bytes | None = None,
    clock: Clock | None = None,
    inspect: Inspector | None = None,
    on_unpersistable: str = "restart",
    strict: bool = False,
) -> AsyncActor:
    """An asyncio actor (see ``create_actor`` for the arguments)."""
    return AsyncActor(
        machine,
        input=input,
        snapshot=snapshot,
        clock=clock or AsyncioClock(),
        inspect=inspect,
        on_unpersistable=on_unpersistable,
        strict=strict,
    )


async def wait_for_async(
    actor: Actor, predicate: Callable[[Snapshot], bool], timeout: int | None = None
) -> Snapshot:
    """Await until ``predicate(snapshot)`` holds (``timeout`` in ms)."""
    if isinstance(actor.clock, SimulatedClock):
        return wait_for(actor, predicate, timeout)
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Snapshot] = loop.create_future()

    def check(snapshot: Snapshot) -> None:
        if not future.done() and predicate(snapshot):
            future.set_result(snapshot)

    def ended() -> None:
        if not future.done():
            future.set_exception(
                ActorStoppedError(f"actor {actor.id!r} stopped before the condition held")
            )

    subscription = actor.subscribe(check, complete=ended)
    try:
        check(actor.get_snapshot())
        return await asyncio.wait_for(future, None if timeout is None else timeout / 1000)
    finally:
        subscription.unsubscribe()
