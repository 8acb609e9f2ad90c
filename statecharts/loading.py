"""Loading machine configs from JSON or YAML files."""

from __future__ import annotations

import re
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
            return yaml.load(text, Loader=_yaml_loader(yaml))  # a SafeLoader: data only
        except yaml.YAMLError as exc:
            raise MachineDefinitionError([f"{file}: not valid YAML: {exc}"]) from exc
    raise MachineDefinitionError([f"{file}: a machine file ends in .json, .yaml or .yml"])


def _yaml_loader(yaml: Any) -> Any:
    """PyYAML's SafeLoader with YAML 1.2's booleans: 1.1 also reads on/off/yes/no as booleans,
    which would turn every ``on:`` (a state's transitions) into the key ``True``."""

    class Loader(yaml.SafeLoader):  # type: ignore[name-defined,misc]
        pass

    bool_tag = "tag:yaml.org,2002:bool"
    Loader.yaml_implicit_resolvers = {
        first: [(tag, pattern) for tag, pattern in resolvers if tag != bool_tag]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    Loader.add_implicit_resolver(bool_tag, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                 list("tTfF"))
    return Loader


def load_machine(path: str | Path, **implementations: Any) -> Machine:
    """``create_machine`` for a config file; keyword arguments as ``create_machine``'s."""
    return create_machine(read_config(path), **implementations)
