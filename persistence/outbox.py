"""The outbox: which effects are recorded with a step, and how a worker executes them.

Effects that reach the outside world (user actions, invoked actors, emitted events, messages to
other actors) are written to `workflow_effects` in the step's transaction and executed after the
commit, from their stored JSON record, so an effect recovered after a crash runs exactly like a
fresh one. Timers live in the snapshot (and the run's `wake_at`); log lines and stops of
synchronous children have nothing to redo, so they are not recorded.

An invoked actor's result comes back as an event (`xstate.done.actor.<id>` with `output`, or
`xstate.error.actor.<id>` with `error`), applied in the next step together with the outcome.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from functools import lru_cache
from typing import Any, Generic, TypeVar

import msgspec

from persistence.breakers import SharedBreaker
from persistence.stores import EffectOutcome, NewEffect
from persistence.stores.rules import CALL, call_key, run_of_outbox_key
from statecharts import Machine
from statecharts.effects import Effect, Log, StartChild
from statecharts.errors import ContextError
from statecharts.events import done_actor_event_type, error_actor_event_type
from statecharts.frozen import freeze, storable_text, thaw
from statecharts.idempotency import KEY_LENGTH
from statecharts.logic import AsyncLogic, CallableLogic, CallbackLogic, error_to_json, is_external
from statecharts.nodes import InvokeDef
from statecharts.retry_policy import error_names

T = TypeVar("T")

log = logging.getLogger("statecharts.runs")

DRY_RUN = "dry-run"
"""The result recorded for an external effect a dry run did not execute (and the output an
external invoke returns to the machine in a dry run)."""

RECORDED_KINDS = frozenset({"action", "start_child", "emit"})
"""Effect kinds written to the outbox; the others are applied in memory (see module doc), or,
for child machines and the messages between runs, in the step's transaction
(`persistence.children`)."""

_current_key: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "statecharts_idempotency_key", default=None
)

Listener = Callable[[Mapping[str, Any]], None]


class StopFlag:
    """Whether a running call was told to stop: set by the executor's threads, read by the
    call's (`heartbeat`, `call_stopped`). Nothing waits on it, so it is a plain attribute, not
    a `threading.Event` (whose lock and condition each call paid for on the hot path)."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        """Tell the call to stop."""
        self._set = True

    def is_set(self) -> bool:
        """Whether the call was told to stop."""
        return self._set


class CallContext:
    """What a running call can tell and be told: its heartbeats (with details) and its stop."""

    __slots__ = ("beat_at", "details", "stopped")

    def __init__(self) -> None:
        self.stopped = StopFlag()
        self.beat_at = time.monotonic()
        self.details: Any = None


_current_call: contextvars.ContextVar[CallContext | None] = contextvars.ContextVar(
    "statecharts_call", default=None
)


def heartbeat(details: Any = None) -> bool:
    """Tell the worker that the call running here is alive (with `details` to keep, JSON:
    shown on the run's page and kept for its next attempt); False once the call was stopped
    (its invoking state was left, its run ended or was cancelled, or its attempt timed out),
    when it should return: its result will be dropped. Outside a durable call, True."""
    call = _current_call.get()
    if call is None:
        return True
    call.beat_at = time.monotonic()
    if details is not None:
        call.details = thaw(freeze(details, "details"))
    return not call.stopped.is_set()


def call_stopped() -> bool:
    """Whether the durable call running here was stopped (see `heartbeat`); False outside."""
    call = _current_call.get()
    return call is not None and call.stopped.is_set()


class _Setting(Generic[T]):
    """`with`: a context variable set to a value for the block, then reset. A class, not a
    `@contextmanager` generator: every call and effect runs inside two of these, and the
    generator's manager costs about two and a half times as much."""

    __slots__ = ("_token", "_value", "_var")

    def __init__(self, var: contextvars.ContextVar[T], value: T) -> None:
        self._var, self._value = var, value

    def __enter__(self) -> None:
        self._token = self._var.set(self._value)

    def __exit__(self, *exc: object) -> None:
        self._var.reset(self._token)


def running_call(call: CallContext) -> AbstractContextManager[None]:
    """Make `call` what `heartbeat` and `call_stopped` see in this thread or task."""
    return _Setting(_current_call, call)


def call_context(call: CallContext, key: str, run_id: str) -> contextvars.Context:
    """A copy of this context in which `call` is what `heartbeat` and `call_stopped` see and
    `key` (of run `run_id`) what `current_idempotency_key` and `current_run_id` see: the
    context a coroutine call's task runs in, set once before it starts (entered and left
    around the call in the task, `running_call` and `_effect_key` kept four more objects
    alive per waiting call)."""
    context = contextvars.copy_context()
    context.run(_set_call, call, (key, run_id))
    return context


def _set_call(call: CallContext, key: tuple[str, str]) -> None:
    _current_call.set(call)
    _current_key.set(key)


def current_idempotency_key() -> str | None:
    """The idempotency key of the effect being executed (None outside an effect).

    Functions that cannot take an `idempotency_key=` argument read it here, e.g. to pass it to
    a payment API. The key is the same when a crash makes the effect run again.
    """
    current = _current_key.get()
    return None if current is None else current[0]


def current_run_id() -> str | None:
    """The id of the run whose effect is being executed (None outside an effect): the key is a
    hash, so code that logs or records per run reads the run here."""
    current = _current_key.get()
    return None if current is None else current[1]


def _effect_key(key: str, run_id: str) -> AbstractContextManager[None]:
    """Make `key` (of run `run_id`) what `current_idempotency_key` and `current_run_id` see."""
    return _Setting(_current_key, (key, run_id))


def to_outbox(effects: Iterable[Effect], start_index: int = 0) -> list[NewEffect]:
    """The effects to record for a step, as JSON payloads, indexed from `start_index` (a
    child machine is no outbox effect: it starts as a child run with the step). Invoked and
    spawned functions and coroutines are recorded as calls beside the run (`CALL`:
    `persistence.calls` runs them, a limited one once it has its places)."""
    recorded = [e for e in effects if e.kind in RECORDED_KINDS and not starts_child_run(e)]
    return [
        NewEffect(start_index + i, CALL if isinstance(e, StartChild) else e.kind, thaw(e.to_json()))
        for i, e in enumerate(recorded)
    ]


def starts_child_run(effect: Effect) -> bool:
    """Whether `effect` starts a child machine (a durable child run, not a call)."""
    return isinstance(effect, StartChild) and isinstance(effect.logic, Machine)


def log_effects(effects: Iterable[Effect], run_id: str) -> None:
    """Write the step's `log` effects (not recorded in the outbox)."""
    for e in effects:
        if isinstance(e, Log):
            log.info("run %s: %s %s", run_id, e.label or "log", thaw(e.value))


class Executed(msgspec.Struct, frozen=True):
    """An executed effect: its outcome, the event it sends back (if any), and whether the run
    must fail because of it (an action that raised)."""

    outcome: EffectOutcome
    event: dict[str, Any] | None = None
    fails_run: str | None = None
    transient: str | None = None
    """A failure the call site declared transient: the step is not committed, the run is
    released with a backoff and this effect runs again (same key)."""
    poisoned: str | None = None
    """Why a value it returned was refused (no store holds it exactly); the run fails."""
    traceback: str | None = None
    """Where the user's code raised, when it failing fails the run (`fails_run`)."""


TRACEBACK_CHARS = 8000
"""How much of a traceback is stored: its end, the frames nearest where it raised."""


def traceback_text(error: BaseException) -> str:
    """`error`'s traceback (with its causes) as storable text, as the on-call view shows it
    beside a failed call's attempt or a failed run's error."""
    return storable_text("".join(traceback.format_exception(error))[-TRACEBACK_CHARS:])


class ActionFailed(Exception):
    """Raised inside `execute` bookkeeping; carries the user action's error text."""


def _accepts_key(fn: Callable[..., Any]) -> bool:
    try:
        return _takes_key_cached(fn)
    except TypeError:  # an unhashable callable: not cached
        return _takes_key(fn)


@lru_cache(maxsize=1024)  # inspect.signature costs more than most steps' own work
def _takes_key_cached(fn: Callable[..., Any]) -> bool:
    return _takes_key(fn)


def _takes_key(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.kind is inspect.Parameter.VAR_KEYWORD or p.name == "idempotency_key" for p in params
    )


def _call(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], key: str, outbox_key: str
) -> Any:
    """Call user code with the idempotency key (as a keyword if it takes one)."""
    if _accepts_key(fn):
        kwargs = {**kwargs, "idempotency_key": key}
    with _effect_key(key, run_of_outbox_key(outbox_key)):
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            result = asyncio.run(_await(result))
    return result


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _actor_callable(logic: Any) -> Callable[..., Any] | None:
    """The function behind invoked actor logic that a worker can run to completion: plain
    functions, `from_callable` and `from_async`. Child machines run as child runs instead;
    callback actors do not run in durable runs (docs/actors.md says why)."""
    if isinstance(logic, CallableLogic | AsyncLogic):
        return logic.fn
    if isinstance(logic, Machine | CallbackLogic) or not callable(logic):
        return None
    return logic  # type: ignore[no-any-return]


def _find_action(machine: Machine, name: str) -> Callable[..., Any] | None:
    """A user action by its recorded name: from `actions=`, else an inline function in the
    definition (whose name is its `__name__`)."""
    named = machine.implementations.actions.get(name)
    if callable(named):
        return named
    return machine.definition.inline_actions.get(name)


def invoke_of(machine: Machine, payload: Mapping[str, Any]) -> InvokeDef | None:
    """The call site (invoke) a recorded `start_child` came from; None for a spawned child."""
    invoked_by = payload.get("invoked_by")
    if isinstance(invoked_by, str):
        for invoke in machine.get_state_node(invoked_by).invoke:
            if invoke.id == payload.get("id"):
                return invoke
    return None


def actor_logic(
    machine: Machine, payload: Mapping[str, Any]
) -> tuple[Any, str | None, bool, bool | tuple[str, ...]]:
    """(logic, breaker name, external, transient) of a recorded `start_child`: from the
    invoking state's definition when it was invoked, else by name from `actors=` (spawned
    children)."""
    return _logic_of(machine, payload, invoke_of(machine, payload))


def _logic_of(
    machine: Machine, payload: Mapping[str, Any], invoke: InvokeDef | None
) -> tuple[Any, str | None, bool, bool | tuple[str, ...]]:
    """`actor_logic`, its call site `invoke` already found."""
    if invoke is not None:
        logic = invoke.logic if invoke.logic is not None else machine.resolve_actor(invoke.src)[1]
        return logic, invoke.breaker, invoke.external, invoke.transient
    logic = machine.resolve_actor(str(payload.get("src")))[1]
    return logic, None, is_external(logic), False


def is_transient(declared: bool | tuple[str, ...], error: Mapping[str, Any]) -> bool:
    """Whether a call site's `transient` declaration covers `error` (its JSON): every error, or
    one whose class or a base class is named (as `retry.non_retryable` matches)."""
    if isinstance(declared, bool):
        return declared
    return bool(set(error_names(error)) & set(declared))


class CallPlan(msgspec.Struct, frozen=True):
    """A call about to run: the function, its argument and idempotency key, the invoke id its
    result answers, its breaker and which of its failures are transient."""

    fn: Callable[..., Any]
    argument: Any
    key: str
    outbox_key: str
    child_id: str
    breaker: SharedBreaker | None
    transient: bool | tuple[str, ...]
    site: InvokeDef | None = None
    """The invoke it comes from (None: a spawned child): its timeouts (`invoke_of`)."""


class Executor:
    """Runs recorded effects. `breaker(name)` gives the shared breaker of a downstream (invokes
    that name one go through it); `now()` is the runtime's clock."""

    def __init__(
        self,
        listeners: Mapping[str, list[Listener]],
        breaker: Callable[[str], SharedBreaker],
        now: Callable[[], int],
        dry_run: bool = False,
    ) -> None:
        self._listeners = listeners
        self._breaker = breaker
        self._now = now
        self._dry_run = dry_run

    def _action(self, machine: Machine, payload: Mapping[str, Any], key: str) -> Executed:
        name = str(payload.get("type"))
        fn = _find_action(machine, name)
        if fn is None:
            message = f"action {name!r} is not a named action of machine {machine.id!r}"
            return Executed(EffectOutcome(key, "failed", None, message), fails_run=message)
        if self._dry_run and is_external(fn):
            return Executed(EffectOutcome(key, "skipped", DRY_RUN))
        params = payload.get("params") or {}
        context, event = freeze(payload.get("context") or {}), freeze(payload.get("event") or {})
        try:
            result = _call(fn, (context, event), dict(params), call_key(key), key)
        except Exception as exc:
            message = storable_text(f"action {name!r} raised {type(exc).__name__}: {exc}")
            return Executed(
                EffectOutcome(key, "failed", None, message),
                fails_run=message,
                traceback=traceback_text(exc),
            )
        return Executed(EffectOutcome(key, "done", _json_or_none(result)))

    def execute(
        self, machine: Machine, kind: str, payload: Mapping[str, Any], key: str
    ) -> Executed:
        """Execute one recorded effect and report how it ended (never raises for user errors)."""
        if kind == "action":
            return self._action(machine, payload, key)
        if kind in ("start_child", CALL):
            return self._child(machine, payload, key)
        if kind == "emit":
            return self._emit(payload, key)
        # kinds recorded by an older release (send_to, send_parent): now delivered with the
        # step that sends them; a record left from before is not executed
        return Executed(EffectOutcome(key, "skipped", None, f"{kind} is not an outbox effect"))

    def _child(self, machine: Machine, payload: Mapping[str, Any], key: str) -> Executed:
        """An invoked function or coroutine run to completion here, in this thread."""
        plan = self.plan_call(machine, payload, key)
        if isinstance(plan, Executed):
            return plan
        try:
            result = _call(plan.fn, (plan.argument,), {}, plan.key, plan.outbox_key)
        except Exception as exc:
            return self.call_ended(plan, error=exc)
        return self.call_ended(plan, result)

    def plan_call(
        self, machine: Machine, payload: Mapping[str, Any], key: str
    ) -> CallPlan | Executed:
        """What calling a recorded `start_child` runs, or how it ended without running (its
        actor cannot be found or run here, a dry run, an open breaker)."""
        child_id, src = str(payload.get("id")), str(payload.get("src"))
        try:
            site = invoke_of(machine, payload)
            logic, breaker_name, reaches_out, transient = _logic_of(machine, payload, site)
        except Exception as exc:
            return self._child_failed(child_id, key, exc)
        if self._dry_run and reaches_out:
            event = {"type": done_actor_event_type(child_id), "output": DRY_RUN}
            return Executed(EffectOutcome(key, "skipped", DRY_RUN), event)
        fn = _actor_callable(logic)
        if fn is None:
            return self._child_failed(
                child_id, key, TypeError(f"actor {src!r} cannot run in a durable worker")
            )
        # A retried call site has a key stable across its attempts; else the effect's own.
        user_key = call_key(key, payload.get("key"), site.key_length if site else KEY_LENGTH)
        breaker = self._breaker(breaker_name) if breaker_name else None
        plan = CallPlan(fn, payload.get("input"), user_key, key, child_id, breaker, transient, site)
        if breaker is not None:
            try:
                breaker.before_call(self._now())  # an open breaker fails fast, same error path
            except Exception as exc:
                return self._failed_call(plan, exc)
        return plan

    def call_ended(
        self, plan: CallPlan, result: Any = None, error: BaseException | None = None
    ) -> Executed:
        """How a call of `plan` ended: with `result`, or raising `error`."""
        if plan.breaker is not None:
            plan.breaker.record(error is None, self._now())
        if error is not None:
            return self._failed_call(plan, error)
        try:
            output = thaw(freeze(result, "output"))
        except ContextError as exc:  # a value no store holds exactly: the run fails here
            message = f"invoke {plan.child_id!r} returned a value that cannot be stored: {exc}"
            return Executed(
                EffectOutcome(plan.outbox_key, "failed", None, message),
                fails_run=message,
                poisoned=str(exc),
                traceback=traceback_text(exc),
            )
        event = {"type": done_actor_event_type(plan.child_id), "output": output}
        return Executed(EffectOutcome(plan.outbox_key, "done", output), event)

    def _failed_call(self, plan: CallPlan, exc: BaseException) -> Executed:
        failed = self._child_failed(plan.child_id, plan.outbox_key, exc)
        if failed.event is not None and is_transient(plan.transient, failed.event["error"]):
            # the event is not applied (the step rolls back); kept for its retry_after
            return Executed(failed.outcome, failed.event, transient=failed.outcome.error)
        return failed

    def _child_failed(self, child_id: str, key: str, exc: BaseException) -> Executed:
        error = error_to_json(exc)  # (its message made storable)
        return Executed(
            EffectOutcome(key, "failed", None, f"{error['name']}: {error['message']}"),
            {"type": error_actor_event_type(child_id), "error": error},
        )

    def _emit(self, payload: Mapping[str, Any], key: str) -> Executed:
        event = payload.get("event") or {}
        errors = []
        for fn in [*self._listeners.get(str(event.get("type")), []), *self._listeners.get("*", [])]:
            try:
                _call(fn, (event,), {}, call_key(key), key)
            except Exception as exc:  # a listener's failure must not fail the run
                errors.append(f"{type(exc).__name__}: {exc}")
                log.warning("listener for %s raised %s", event.get("type"), exc)
        if errors:
            return Executed(EffectOutcome(key, "failed", None, "; ".join(errors)))
        return Executed(EffectOutcome(key, "done"))


def _json_or_none(value: Any) -> Any:
    try:
        return thaw(freeze(value, "result"))
    except Exception:
        return None  # an action's return value is informational only
