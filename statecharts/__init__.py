"""statecharts: XState-style statecharts for Python.

Define a machine with a config dict (XState v5 keys), run it with the pure
``machine.transition(snapshot, event)`` or an actor, persist snapshots as JSON.
"""

from .actions import (assign, cancel, emit, enqueue_actions, forward_to, log, raise_, send_parent,
                      send_to, spawn_child, stop_child)
from .errors import (ActorStoppedError, ContextError, EventError, ImplementationError,
                     InfiniteLoopError, MachineDefinitionError, SnapshotError, StatechartError,
                     SnapshotVersionError)
from .frozen import FrozenDict, FrozenList, freeze, thaw
from .guards import and_, not_, or_, state_in
from .loading import load_machine
from .machine import Machine, create_machine, setup
from .snapshot import Snapshot, Timer, snapshot_to_json

__all__ = [
    "ActorStoppedError", "ContextError", "EventError", "FrozenDict", "FrozenList",
    "ImplementationError", "InfiniteLoopError", "Machine", "MachineDefinitionError", "Snapshot",
    "SnapshotError", "SnapshotVersionError", "StatechartError", "Timer", "and_", "assign",
    "cancel", "create_machine", "emit", "enqueue_actions", "forward_to", "freeze",
    "load_machine", "log", "not_", "or_", "raise_", "send_parent", "send_to", "setup",
    "snapshot_to_json", "spawn_child", "state_in", "stop_child", "thaw",
]
