"""Finding the machine to draw: ``MODULE:NAME`` (an importable Machine) or a JSON/YAML file.

A machine file names its guards, actions, actors and delays but cannot carry their code, so
for drawing only, each name it uses gets a placeholder implementation that is never run: the
diagram needs the names, not the behaviour.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..definition import is_number_text
from ..errors import MachineDefinitionError
from ..loading import read_config
from ..machine import Machine, create_machine

_FILE_SUFFIXES = (".json", ".yaml", ".yml")
# Parts of a config that hold data, not names of implementations.
_DATA_KEYS = frozenset({"context", "meta", "input", "output", "params", "description"})


class SourceError(ValueError):
    """The machine to draw could not be found; the message names what was looked for."""


def load_machine_for_drawing(spec: str) -> Machine:
    """The machine named by ``spec``: ``package.module:NAME`` or a ``.json``/``.yaml`` file."""
    if spec.endswith(_FILE_SUFFIXES):
        return _from_file(Path(spec))
    if ":" in spec:
        return _from_module(spec)
    raise SourceError(
        f"{spec!r}: give MODULE:NAME (e.g. machines.orders:machine) or a .json / .yaml machine file"
    )


def _from_file(path: Path) -> Machine:
    if not path.is_file():
        raise SourceError(f"{path}: no such machine file")
    return machine_from_config(read_config(path), str(path))


def machine_from_config(config: Any, where: str) -> Machine:
    """A machine from a config that names its implementations, each given a placeholder
    (``where`` names the config's origin in errors)."""
    if not isinstance(config, Mapping):
        raise MachineDefinitionError([f"{where}: a machine config is a mapping"])
    names = _Names()
    names.collect(config)
    return create_machine(
        config,
        guards={name: _never_run for name in names.guards},
        actions={name: _never_run for name in names.actions},
        actors={name: _never_run for name in names.actors},
        delays={name: _never_run for name in names.delays},
    )


def _never_run(*_: Any, **__: Any) -> Any:
    raise RuntimeError("placeholder implementation: this machine was loaded only to draw it")


def _from_module(spec: str) -> Machine:
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SourceError(f"{spec}: cannot import module {module_name!r}: {exc}") from exc
    value = getattr(module, attribute, None)
    if value is None:
        registry = getattr(module, "MACHINES", None)
        value = registry.get(attribute) if isinstance(registry, Mapping) else None
    if value is None:
        raise SourceError(
            f"{spec}: module {module_name!r} has no attribute or MACHINES entry {attribute!r}"
        )
    if not isinstance(value, Machine):
        raise SourceError(f"{spec}: {attribute!r} is a {type(value).__name__}, not a Machine")
    return value


class _Names:
    """The implementation names a config refers to."""

    def __init__(self) -> None:
        self.guards: set[str] = set()
        self.actions: set[str] = set()
        self.actors: set[str] = set()
        self.delays: set[str] = set()

    def collect(self, value: Any) -> None:
        if isinstance(value, list):
            for item in value:
                self.collect(item)
            return
        if not isinstance(value, Mapping):
            return
        for key, item in value.items():
            if key in _DATA_KEYS:
                continue
            if key == "guard":
                self.guards.update(_type_names(item))
            elif key in ("entry", "exit", "actions"):
                self.actions.update(_type_names(item))
            elif key == "src" and isinstance(item, str):
                self.actors.add(item)
            elif key == "after" and isinstance(item, Mapping):
                self.delays.update(k for k in item if isinstance(k, str) and not is_number_text(k))
            self.collect(item)


def _type_names(value: Any) -> Iterator[str]:
    """Names in a guard or action list: strings and ``{"type": name}`` mappings."""
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, str):
            yield item
        elif isinstance(item, Mapping) and isinstance(item.get("type"), str):
            yield item["type"]
