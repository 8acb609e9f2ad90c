"""Guards: named, parameterized, inline, and the combinators ``and_``, ``or_``, ``not_``,
``state_in``.

A guard is evaluated by the pure core with the context as it was before the transition's own
assigns. User guards are called ``fn(context, event, **params)`` and must be pure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from .errors import ImplementationError

GuardLike = Any  # a name, {"type", "params"}, a callable or a GuardSpec
Fn = TypeVar("Fn", bound=Callable[..., Any])


class GuardScope(Protocol):
    """What a guard may ask beyond context and event (the algorithm's ``Step``)."""

    def in_state(self, state_id: str) -> bool: ...


@dataclass(frozen=True)
class GuardSpec:
    """A guard as written (``type``/``params``/``children``) plus, once resolved, its test.

    ``type`` is the implementation's name, or ``and`` / ``or`` / ``not`` / ``stateIn``.
    """

    type: str
    params: Any = None
    children: tuple[Any, ...] = ()
    fn: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    description: str | None = None

    def evaluate(self, context: Any, event: Any, scope: GuardScope) -> bool:
        """True when the guard passes for ``context`` and ``event``.

        A guard function marked ``takes_scope = True`` is also given the scope
        (``fn(context, event, scope, **params)``): interpreters of other chart languages use it
        to test the configuration and to queue the error events their guards may raise.
        """
        kind = self.type
        if self.fn is not None:
            params = self.params
            if callable(params):
                params = params(context, event)
            args = (
                (context, event, scope)
                if getattr(self.fn, "takes_scope", False)
                else (context, event)
            )
            try:
                result = self.fn(*args, **params) if params else self.fn(*args)
                return bool(result)
            except Exception as exc:  # a user guard failed: say which one
                raise ImplementationError(f"guard '{kind}'", exc) from exc
        if kind == "and":
            return all(child.evaluate(context, event, scope) for child in self.children)
        if kind == "or":
            return any(child.evaluate(context, event, scope) for child in self.children)
        if kind == "not":
            return not self.children[0].evaluate(context, event, scope)
        if kind == "stateIn":
            return scope.in_state(self.params)
        raise ImplementationError(f"guard '{kind}'", LookupError("guard was never resolved"))

    def names(self) -> list[str]:
        """The names of the user guards this guard uses (for validation and skeletons)."""
        if self.type in ("and", "or", "not"):
            return [name for child in self.children for name in child.names()]
        return [] if self.type == "stateIn" else [self.type]


def and_(*guards: GuardLike) -> GuardSpec:
    """Passes when every guard passes (``and_("a", "b")`` or ``and_(["a", "b"])``)."""
    return GuardSpec("and", children=_flatten(guards))


def or_(*guards: GuardLike) -> GuardSpec:
    """Passes when any guard passes."""
    return GuardSpec("or", children=_flatten(guards))


def not_(guard: GuardLike) -> GuardSpec:
    """Passes when ``guard`` fails."""
    return GuardSpec("not", children=(guard,))


def state_in(state: str) -> GuardSpec:
    """Passes when the machine is in ``state`` (``"#id"`` or a dotted path from the root)."""
    return GuardSpec("stateIn", params=state)


def described(fn: Fn, description: str) -> Fn:
    """``fn``, a guard function, with the words diagrams say for it wherever it is used by
    name (``GuardSpec.description``); ``""`` says nothing, for a guard that only does
    bookkeeping the transitions' own descriptions already tell (an imported n8n workflow's
    "which node runs next")."""
    vars(fn)["description"] = description
    return fn


def _flatten(guards: tuple[Any, ...]) -> tuple[Any, ...]:
    if len(guards) == 1 and isinstance(guards[0], list | tuple):
        return tuple(guards[0])
    return guards
