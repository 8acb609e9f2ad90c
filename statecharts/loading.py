"""Loading machine configs from JSON or YAML files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from .errors import MachineDefinitionError
from .machine import Machine, create_machine


def read_config(path: str | Path) -> Any:
    """The config in a ``.json``, ``.yaml`` or ``.yml`` file."""
    file = Path(path)
    text = file.read_bytes()
    if file.suffix == ".json":
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise MachineDefinitionError([f"{file}: not valid JSON: {exc}"]) from exc
    if file.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise MachineDefinitionError([f"{file}: reading YAML needs PyYAML "
                                          "(pip install 'statecharts[yaml]')"]) from exc
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise MachineDefinitionError([f"{file}: not valid YAML: {exc}"]) from exc
    raise MachineDefinitionError([f"{file}: a machine file ends in .json, .yaml or .yml"])


def load_machine(path: str | Path, **implementations: Any) -> Machine:
    """``create_machine`` for a config file; keyword arguments as ``create_machine``'s."""
    return create_machine(read_config(path), **implementations)
