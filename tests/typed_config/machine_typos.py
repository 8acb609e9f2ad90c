"""A user's machine with mistakes in it: ``mypy --strict`` must flag each line marked
with a ``mypy:`` comment, and the words after it must be in the message (see test_typed_config).

Where XState allows one shape only (a state, the machine's root), mypy names the unknown key.
Where it allows several (a transition is a target, an object or a list), mypy flags the line
and names the expected types instead: its TypedDict inference does not look inside unions.
"""

from __future__ import annotations

from statecharts import MachineConfig

config: MachineConfig = {  # mypy: "intial" MachineConfig
    "id": "order",
    "intial": "cart",
    "states": {
        "cart": {"on": {"CHECKOUT": {"traget": "paid"}}},  # mypy: TransitionConfig
        "paying": {"invoke": {"src": "charge", "onEror": "cart"}},  # mypy: InvokeConfig
        "waiting": {"entri": "log", "after": {"1000": "cart"}},  # mypy: "entri" StateNodeConfig
        "paid": {"type": "finall"},  # mypy: "type" Literal['finall']
        "done": {"type": "final", "failure": 1},  # mypy: "failure" "int"
        "busy": {"tags": 5},  # mypy: "tags" "int"
    },
}
