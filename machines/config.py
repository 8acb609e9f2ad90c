"""Reading a workflow's machine config from its JSON file.

The configs are data; two conventions connect them to the run:

- the root ``context`` holds defaults, and the run's input fills in the rest (a run started
  with ``{"today": "2026-03-02"}`` has ``context["today"] == "2026-03-02"``);
- an invoke's ``"input": {"$context": ["a", "b"]}`` hands the invoked function those context
  fields, so every call's input is visible in the file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from statecharts import MachineDefinitionError
from statecharts.frozen import thaw
from statecharts.loading import read_config

CONTEXT_REF = "$context"


def load_config(path: Path) -> dict[str, Any]:
    """The config in ``path`` with the two conventions above resolved."""
    config = read_config(path)
    if not isinstance(config, dict):
        raise MachineDefinitionError([f"{path}: a machine config is a JSON object"])
    defaults = config.get("context") or {}
    if not isinstance(defaults, dict):
        raise MachineDefinitionError([f"{path}: context: a mapping of default values"])
    config["context"] = _context_from_input(defaults)
    _resolve_inputs(config, str(path))
    return config


def _context_from_input(defaults: Mapping[str, Any]) -> Callable[[Any], dict[str, Any]]:
    def context(input: Any) -> dict[str, Any]:
        given = thaw(input) if input is not None else {}
        if not isinstance(given, dict):
            raise TypeError(f"a run's input is a mapping of context fields, not {given!r}")
        return {**thaw(defaults), **given}

    return context


def _resolve_inputs(node: Any, path: str) -> None:
    if isinstance(node, list):
        for i, item in enumerate(node):
            _resolve_inputs(item, f"{path}[{i}]")
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key == "input" and isinstance(value, dict) and CONTEXT_REF in value:
            node[key] = _picker(value[CONTEXT_REF], f"{path}.input")
        else:
            _resolve_inputs(value, f"{path}.{key}")


def _picker(fields: Any, path: str) -> Callable[[Any, Any], dict[str, Any]]:
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
        raise MachineDefinitionError([f"{path}: {CONTEXT_REF} is a list of context field names"])
    names = tuple(fields)

    def pick(context: Any, event: Any) -> dict[str, Any]:
        missing = [n for n in names if n not in context]
        if missing:
            raise KeyError(f"{path}: context has no field(s) {', '.join(missing)}")
        return {name: thaw(context[name]) for name in names}

    pick.__name__ = f"pick({', '.join(names)})"
    return pick
