"""Actor logic kinds besides machines: plain functions, coroutines and callbacks.

Each is a small description of how to run a child; the actor runtimes (``actor.py``,
``async_actor.py``) run them. Completion raises ``xstate.done.actor.<id>`` in the parent with the
output, failure ``xstate.error.actor.<id>`` with the error as JSON.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .retry_policy import error_json


@dataclass(frozen=True)
class CallableLogic:
    """A synchronous function ``fn(input)`` that returns the output or raises."""

    fn: Callable[..., Any]
    name: str
    wants_key: bool = field(default=False)


@dataclass(frozen=True)
class AsyncLogic:
    """A coroutine function ``async fn(input)`` that returns the output or raises."""

    fn: Callable[..., Awaitable[Any]]
    name: str
    wants_key: bool = field(default=False)


@dataclass(frozen=True)
class CallbackLogic:
    """A long-running ``fn(send_back, receive, input)``; it may return a cleanup function
    that runs when the child stops. ``receive(handler)`` registers a handler for events sent
    to the child."""

    fn: Callable[..., Any]
    name: str


def _wants_key(fn: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "idempotency_key" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


def from_callable(fn: Callable[..., Any], name: str | None = None) -> CallableLogic:
    """Actor logic from a function ``fn(input)``; a keyword parameter ``idempotency_key``,
    when declared, receives a key stable across retries of the same call."""
    return CallableLogic(fn, name or fn.__name__, _wants_key(fn))


def from_async(fn: Callable[..., Awaitable[Any]], name: str | None = None) -> AsyncLogic:
    """Actor logic from a coroutine function ``async fn(input)``."""
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"from_async needs a coroutine function, not {fn!r}")
    return AsyncLogic(fn, name or fn.__name__, _wants_key(fn))


def from_callback(fn: Callable[..., Any], name: str | None = None) -> CallbackLogic:
    """Actor logic from ``fn(send_back, receive, input) -> cleanup | None``."""
    return CallbackLogic(fn, name or fn.__name__)


_EXTERNAL = "__statecharts_external__"
T = TypeVar("T")


def external(fn: T) -> T:
    """Mark an action implementation or actor function as reaching the outside world (an
    email, a payment, a task in another tool): a dry run records it as skipped instead of
    running it. Invokes can also say ``"external": true``."""
    target = getattr(fn, "fn", fn)
    setattr(target, _EXTERNAL, True)
    return fn


def is_external(fn: Any) -> bool:
    """True for implementations marked with ``external``."""
    return bool(getattr(getattr(fn, "fn", fn), _EXTERNAL, False))


def error_to_json(error: BaseException) -> dict[str, Any]:
    """An exception as the JSON an ``xstate.error.actor`` event carries."""
    return error_json(error)
