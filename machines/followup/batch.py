"""The per-item loop shared by Evaluate and Enrich: pick the next item, handle it, move on.

In the configs it reads ``picking -> <work on the item> -> picking``; an item whose call failed
for good (``onFinalFailure: "skip"``) is listed in the context's ``skipped`` and the loop goes
on, so one bad item never stops the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statecharts import assign
from statecharts.frozen import thaw


def failed(event: Mapping[str, Any]) -> bool:
    """True for an invoked call's failure event (how a skipped item arrives)."""
    return str(event["type"]).startswith("xstate.error.")


def skip_record(context: Mapping[str, Any], event: Mapping[str, Any], item: str) -> list[Any]:
    """``context["skipped"]`` with this failure added (item name and error)."""
    error = thaw(event.get("error")) or {}
    return [
        *thaw(context["skipped"]),
        {"item": item, "error": error.get("name", "Error"), "message": error.get("message", "")},
    ]


def has_more_items(context: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
    """Items remain."""
    return int(context["index"]) < len(context["items"])


def _remember_items(context: Mapping[str, Any], event: Mapping[str, Any]) -> dict[str, Any]:
    return {"items": event["output"], "index": 0}


def _take_item(context: Mapping[str, Any], event: Mapping[str, Any]) -> dict[str, Any]:
    return {"current": context["items"][int(context["index"])]}


def _next_item(context: Mapping[str, Any], event: Mapping[str, Any]) -> dict[str, Any]:
    return {"index": int(context["index"]) + 1, "current": None}


GUARDS = {"hasMoreItems": has_more_items}
ACTIONS = {
    "rememberItems": assign(_remember_items),
    "takeItem": assign(_take_item),
    "nextItem": assign(_next_item),
}
