"""The machine config, typed: ``TypedDict``s with XState v5's names and nesting, so a type
checker flags unknown keys and wrong value types in a machine before it runs.

Annotate a config to have it checked (``create_machine`` also takes plain mappings, such as
configs read from JSON)::

    from statecharts import MachineConfig, create_machine

    config: MachineConfig = {
        "id": "door", "initial": "closed",
        "states": {"closed": {"on": {"OPEN": "open"}}, "open": {"on": {"CLOSE": "closed"}}},
    }
    machine = create_machine(config)

The names follow XState v5's ``types.ts`` (``MachineConfig``, ``StateNodeConfig``,
``TransitionConfig``, ``InvokeConfig``, ``ParameterizedObject``); the project's extensions are
typed too: an invoke's ``retry`` (``RetryConfig``, the fields of ``RetryPolicy``),
``onFinalFailure``, ``breaker``, ``limit``, ``external``, ``transient`` and ``keyLength``, and
``failure`` on a final state. ``definition.py`` still validates every config at run time;
these types say the same thing earlier (``tests/test_typed_config.py`` keeps the two key sets
equal).
"""

# No `from __future__ import annotations`: TypedDict reads Required[...] at run time.
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Required, TypeAlias, TypedDict

from .actions import BuiltinAction
from .guards import GuardSpec
from .logic import AsyncLogic, CallableLogic, CallbackLogic
from .retry_policy import RetryPolicy

if TYPE_CHECKING:
    from .machine import Machine

StateType: TypeAlias = Literal["atomic", "compound", "parallel", "final", "history"]
HistoryType: TypeAlias = Literal["shallow", "deep"]
Backoff: TypeAlias = Literal["fixed", "linear", "exponential"]
Jitter: TypeAlias = Literal["none", "full"]
FinalFailure: TypeAlias = Literal["fail_run", "skip"]
"""An invoke's ``onFinalFailure`` when retries run out and no ``onError`` handles it: fail the
run (the default) or skip the call and go on along ``onDone``."""


class ParameterizedObject(TypedDict, total=False):
    """A named guard or action with parameters: ``{"type": "isAbove", "params": {"n": 3}}``."""

    type: Required[str]
    params: Mapping[str, Any] | Callable[..., Any]


Guard: TypeAlias = str | ParameterizedObject | GuardSpec | Callable[..., Any]
"""A guard: a name from ``guards=``, a parameterized name, ``and_``/``or_``/``not_``/
``state_in``, or a function ``(context, event) -> bool``."""

Action: TypeAlias = str | ParameterizedObject | BuiltinAction | Callable[..., Any]
"""An action: a name from ``actions=``, a parameterized name, a built-in (``assign``, ``raise_``,
...) or a function ``(context, event)``."""

Actions: TypeAlias = Action | Sequence[Action]


class TransitionConfig(TypedDict, total=False):
    """One transition: where to go, when, and what to do on the way."""

    target: str | Sequence[str]
    guard: Guard
    actions: Actions
    reenter: bool
    description: str
    meta: Mapping[str, Any]


TransitionConfigOrTarget: TypeAlias = str | TransitionConfig
Transitions: TypeAlias = TransitionConfigOrTarget | Sequence[TransitionConfigOrTarget] | None
"""The value of an ``on`` entry, ``always``, ``after`` entry, ``onDone`` or ``onError``: a target,
a transition, or a list of them tried in order (the first whose guard passes is taken)."""

TransitionsConfig: TypeAlias = Mapping[str, Transitions]
"""``on``: event descriptor (``"PAY"``, ``"payment.*"``, ``"*"``) to transitions."""

DelayedTransitions: TypeAlias = Mapping[str | int, Transitions]
"""``after``: milliseconds (a number, or a string of digits) or a name from ``delays=``."""


class RetryConfig(TypedDict, total=False):
    """An invoke's ``retry``: the fields of ``RetryPolicy`` (durations in milliseconds)."""

    max_attempts: int
    initial_interval: int
    backoff: Backoff
    coefficient: float
    max_interval: int | None
    jitter: Jitter
    retry_on: Sequence[str]
    non_retryable: Sequence[str]
    total_timeout: int | None


ActorLogic: TypeAlias = "CallableLogic | AsyncLogic | CallbackLogic | Machine | Callable[..., Any]"
"""What an invoke's ``src`` may be besides a name from ``actors=``."""


class InvokeConfig(TypedDict, total=False):
    """An invoked actor, running while its state is active."""

    src: Required["str | ActorLogic"]
    id: str
    input: Any
    systemId: str
    onDone: Transitions
    onError: Transitions
    onSnapshot: Transitions
    description: str
    meta: Mapping[str, Any]
    # the project's extensions (durable runs)
    retry: RetryConfig | RetryPolicy
    onFinalFailure: FinalFailure
    breaker: str
    limit: str
    external: bool
    transient: bool | Sequence[str]
    timeout: int
    heartbeatTimeout: int
    keyLength: int


Invokes: TypeAlias = str | InvokeConfig | Sequence[str | InvokeConfig]


class StateNodeConfig(TypedDict, total=False):
    """A state: its children, transitions, actions and invoked actors."""

    id: str
    type: StateType
    initial: str
    states: Mapping[str, "StateNodeConfig"]
    on: TransitionsConfig
    always: Transitions
    after: DelayedTransitions
    entry: Actions
    exit: Actions
    invoke: Invokes
    onDone: Transitions
    output: Any
    tags: str | Sequence[str]
    meta: Mapping[str, Any]
    description: str
    history: HistoryType
    """History states: ``"shallow"`` (the default) or ``"deep"``."""
    target: str | Sequence[str]
    """History states: where to go when there is no history yet."""
    failure: bool | str
    """Final states: reaching this state ends the machine (the run) as a failure, with this
    reason text (``True``: the state's id)."""


class MachineConfig(StateNodeConfig, total=False):
    """The root of a machine: a state node plus the initial ``context`` and a ``version``."""

    context: Mapping[str, Any] | Callable[..., Mapping[str, Any]]
    """The initial context, or a function of the run's input returning it."""
    version: str


__all__ = [
    "Action",
    "Actions",
    "ActorLogic",
    "Backoff",
    "DelayedTransitions",
    "FinalFailure",
    "Guard",
    "HistoryType",
    "InvokeConfig",
    "Invokes",
    "Jitter",
    "MachineConfig",
    "ParameterizedObject",
    "RetryConfig",
    "StateNodeConfig",
    "StateType",
    "TransitionConfig",
    "TransitionConfigOrTarget",
    "Transitions",
    "TransitionsConfig",
]
