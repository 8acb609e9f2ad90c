"""The implementations an imported n8n workflow gets for free: n8n's own bookkeeping, which
the user should not have to write.

- Loop Over Items keeps its not-yet-processed items inside the node in n8n. Here the batch
  pointer lives in ``context["loops"][<loop>]`` as ``{"batch_size", "next", "total"}`` (the
  batch handed out is items ``next`` to ``next + batch_size``): ``take_next_batch`` (entry of
  the loop state) moves it, ``batches_exhausted`` tells the loop to take its ``done`` way (no
  batch left to hand out), ``no_items_left`` answers n8n's ``noItemsLeft`` (the batch just
  handed out was the last), ``reset_batches`` forgets the items so the loop can run again.
- Stop and Error fails the run with its message (``n8n_stop_and_error``).

``PROVIDED`` holds them ready for ``create_machine``; the generated skeleton merges them in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

from statecharts.actions import assign


class StopAndError(Exception):
    """The error a Stop and Error node raises; it fails the run."""


def _pointer(context: Any, loop: str) -> dict[str, Any]:
    loops = context.get("loops") if isinstance(context, Mapping) else None
    found = loops.get(loop) if isinstance(loops, Mapping) else None
    return dict(found) if isinstance(found, Mapping) else {"next": 0, "total": None}


def _with_pointer(context: Any, loop: str, pointer: dict[str, Any]) -> dict[str, Any]:
    loops = context.get("loops") if isinstance(context, Mapping) else None
    updated = dict(loops) if isinstance(loops, Mapping) else {}
    updated[loop] = pointer
    return {"loops": updated}


def _item_count(event: Any) -> int:
    """How many items entered the loop: the ``output`` (else ``items``) of the event that led
    into it, as n8n hands a node the previous node's items."""
    items = None
    if isinstance(event, Mapping):
        items = event.get("output", event.get("items"))
    if items is None:
        return 0
    return len(items) if isinstance(items, list | tuple) else 1


def next_batch(context: Any, event: Any, loop: str, batch_size: int) -> dict[str, Any]:
    """The context update for entering loop ``loop``: the first batch when the loop starts
    (``total`` unknown), else the batch after the current one."""
    pointer = _pointer(context, loop)
    if pointer.get("total") is None:
        pointer = {"batch_size": batch_size, "next": 0, "total": _item_count(event)}
    else:
        pointer["next"] = int(pointer["next"]) + batch_size
    return _with_pointer(context, loop, pointer)


def no_batch_left(context: Any, event: Any, loop: str) -> bool:
    """True when loop ``loop`` has handed out all its items (n8n: the ``done`` output)."""
    pointer = _pointer(context, loop)
    total = pointer.get("total")
    return total is not None and int(pointer["next"]) >= int(total)


def no_items_left(context: Any, event: Any, loop: str) -> bool:
    """n8n's ``$node["<loop>"].context["noItemsLeft"]``: true once the batch just handed out
    was the last one (the v1/v2 way to end a loop is an If asking this)."""
    pointer = _pointer(context, loop)
    total = pointer.get("total")
    if total is None:
        return False
    size = pointer.get("batch_size") or 1
    return int(pointer["next"]) + int(size) >= int(total)


def forget_batches(context: Any, event: Any, loop: str) -> dict[str, Any]:
    """The context update that resets loop ``loop`` (n8n resets a loop once it is done)."""
    pointer = _pointer(context, loop)
    return _with_pointer(context, loop, {"batch_size": pointer.get("batch_size"), "next": 0,
                                         "total": None})


def stop_and_error(input: Any) -> NoReturn:
    """Fail the run with the Stop and Error node's message."""
    message = input.get("message") if isinstance(input, Mapping) else None
    raise StopAndError(message or "Stop and Error")


PROVIDED: dict[str, dict[str, Any]] = {
    "guards": {"batches_exhausted": no_batch_left, "no_items_left": no_items_left},
    "actions": {"take_next_batch": assign(next_batch), "reset_batches": assign(forget_batches)},
    "actors": {"n8n_stop_and_error": stop_and_error},
    "delays": {},
}
# Names the import never gives a node's own implementation, so nothing shadows these.
RESERVED = frozenset(name for table in PROVIDED.values() for name in table)
