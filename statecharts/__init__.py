"""statecharts: XState-style statecharts for Python.

Define a machine with a config dict (XState v5 keys), run it with the pure
``machine.transition(snapshot, event)`` or an actor, persist snapshots as JSON.
"""

from .actions import (
    assign,
    cancel,
    emit,
    enqueue_actions,
    forward_to,
    log,
    raise_,
    send_parent,
    send_to,
    spawn_child,
    stop_child,
)
from .actor import Actor, create_actor, wait_for
from .clock import SimulatedClock, SystemClock
from .config import (
    InvokeConfig,
    MachineConfig,
    ParameterizedObject,
    RetryConfig,
    StateNodeConfig,
    TransitionConfig,
)
from .errors import (
    ActorStoppedError,
    ContextError,
    EventError,
    ImplementationError,
    InfiniteLoopError,
    MachineDefinitionError,
    SnapshotError,
    SnapshotVersionError,
    StatechartError,
    SystemIdTakenError,
)
from .frozen import FrozenDict, FrozenList, freeze, thaw
from .guards import and_, not_, or_, state_in
from .inspection import InspectionEvent, logging_inspector
from .loading import load_machine
from .logic import external, from_async, from_callable, from_callback
from .machine import Machine, create_machine, setup
from .retry_policy import RetryPolicy, with_retry
from .snapshot import Snapshot, Timer, snapshot_to_json

__all__ = [
    "Actor",
    "ActorStoppedError",
    "ContextError",
    "EventError",
    "FrozenDict",
    "FrozenList",
    "ImplementationError",
    "InfiniteLoopError",
    "InspectionEvent",
    "InvokeConfig",
    "Machine",
    "MachineConfig",
    "MachineDefinitionError",
    "ParameterizedObject",
    "RetryConfig",
    "RetryPolicy",
    "SimulatedClock",
    "Snapshot",
    "SnapshotError",
    "SnapshotVersionError",
    "StateNodeConfig",
    "StatechartError",
    "SystemClock",
    "SystemIdTakenError",
    "Timer",
    "TransitionConfig",
    "and_",
    "assign",
    "cancel",
    "create_actor",
    "create_machine",
    "emit",
    "enqueue_actions",
    "external",
    "forward_to",
    "freeze",
    "from_async",
    "from_callable",
    "from_callback",
    "load_machine",
    "log",
    "logging_inspector",
    "not_",
    "or_",
    "raise_",
    "send_parent",
    "send_to",
    "setup",
    "snapshot_to_json",
    "spawn_child",
    "state_in",
    "stop_child",
    "thaw",
    "wait_for",
    "with_retry",
]
