"""The implementations an imported n8n workflow gets for free: n8n's own bookkeeping, which
the user should not have to write.

- ``n8n_route`` (an ``assign``) and the guards ``next_node_is`` / ``current_node_is`` run n8n's
  execution stack in ``context["n8n"]`` (see ``execution``): which node runs next, with
  which items, a Merge once its inputs are there, Loop Over Items' memory.
- Stop and Error fails the run with its message (``n8n_stop_and_error``); so does the
  ``loops_forever`` state, entered when the guard ``loops_forever`` finds items going round a
  loop of nodes that do no work, which n8n would run for ever.

``PROVIDED`` holds them ready for ``create_machine``; the generated skeleton merges them in,
and ``machine_config`` puts the item-reading invoke inputs into a loaded config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

from statecharts.actions import assign
from statecharts.guards import described

from .execution import goes_to, loops_forever, resumes, route, with_inputs


class StopAndError(Exception):
    """The error a Stop and Error node raises; it fails the run."""


def stop_and_error(input: Any) -> NoReturn:
    """Fail the run with the Stop and Error node's message."""
    message = input.get("message") if isinstance(input, Mapping) else None
    raise StopAndError(message or "Stop and Error")


def machine_config(config: Any) -> Any:
    """An imported config ready for ``create_machine``: each node's invoke reads the items
    n8n would hand it (a JSON file can only mark where)."""
    return with_inputs(config)


PROVIDED: dict[str, dict[str, Any]] = {
    # n8n's bookkeeping, not a condition a reviewer should read on every arrow: each
    # transition's description already says which wire it follows ("true", "loop", "resume
    # 'X'"), so diagrams leave these guards out
    "guards": {
        "next_node_is": described(goes_to, ""),
        "current_node_is": described(resumes, ""),
        "loops_forever": described(loops_forever, ""),
    },
    "actions": {"n8n_route": assign(route)},
    "actors": {"n8n_stop_and_error": stop_and_error},
    "delays": {},
}
# Names the import never gives a node's own implementation, so nothing shadows these.
RESERVED = frozenset(name for table in PROVIDED.values() for name in table)
