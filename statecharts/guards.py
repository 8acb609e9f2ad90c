"""Guards: named, parameterized, inline, and the combinators ``and_``, ``or_``, ``not_``,
``state_in``.

A guard is evaluated by the pure core with the context as it was before the transition's own
assigns. User guards are called ``fn(context, event, **params)`` and must be pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ImplementationError

GuardLike = Any  # a name, {"type", "params"}, a callable or a GuardSpec
InState = Callable[[str], bool]


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

    def evaluate(self, context: Any, event: Any, in_state: InState) -> bool:
        """True when the guard passes for ``context`` and ``event``."""
        kind = self.type
        if self.fn is not None:
            params = self.params
            if callable(params):
                params = params(context, event)
            try:
                return bool(self.fn(context, event, **params) if params else self.fn(context, event))
            except Exception as exc:  # a user guard failed: say which one
                raise ImplementationError(f"guard '{kind}'", exc) from exc
        if kind == "and":
            return all(child.evaluate(context, event, in_state) for child in self.children)
        if kind == "or":
            return any(child.evaluate(context, event, in_state) for child in self.children)
        if kind == "not":
            return not self.children[0].evaluate(context, event, in_state)
        if kind == "stateIn":
            return in_state(self.params)
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


def _flatten(guards: tuple[Any, ...]) -> tuple[Any, ...]:
    if len(guards) == 1 and isinstance(guards[0], list | tuple):
        return tuple(guards[0])
    return guards
