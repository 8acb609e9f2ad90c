"""Loading machine configs from JSON or YAML files.

YAML is read with a safe loader that follows YAML 1.2's core schema for booleans: only
``true``/``false`` are booleans, so ``on:`` (the transitions key), ``off``, ``yes`` and ``no``
stay strings, as they are in JSON and XState. A key given twice is an error (YAML says keys are
unique; PyYAML would keep the last one silently), an alias may not refer to a node that contains
it (``a: &a [*a]`` would be an infinite value), and aliases may not expand a file beyond
``MAX_YAML_NODES`` nodes (a "billion laughs" of anchors).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from .errors import MachineDefinitionError
from .machine import Machine, create_machine

MAX_YAML_NODES = 1_000_000
"""The most nodes a YAML machine file may hold once its aliases are expanded."""


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
        return read_yaml(text, str(file))
    raise MachineDefinitionError([f"{file}: a machine file ends in .json, .yaml or .yml"])


def read_yaml(text: str | bytes, source: str = "<yaml>") -> Any:
    """The value of a YAML machine file (see the module docstring for the rules)."""
    try:
        import yaml
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MachineDefinitionError(
            [f"{source}: reading YAML needs PyYAML (pip install 'statecharts[yaml]')"]
        ) from exc
    try:
        loader = _loader_class(yaml)(text)
    except yaml.YAMLError as exc:  # e.g. a NUL byte, refused by the reader at once
        raise MachineDefinitionError([f"{source}: not valid YAML: {exc}"]) from exc
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(yaml, node, source)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise MachineDefinitionError([f"{source}: not valid YAML: {exc}"]) from exc
    except RecursionError:
        raise MachineDefinitionError([f"{source}: the YAML nests too deeply to read"]) from None
    finally:
        loader.dispose()


_LOADER: Any = None
_BOOL_12 = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")


def _loader_class(yaml: Any) -> Any:
    global _LOADER
    if _LOADER is None:

        class MachineLoader(yaml.SafeLoader):  # type: ignore[misc,name-defined]
            """SafeLoader with YAML 1.2 booleans, unique keys and no recursive aliases."""

            def __init__(self, stream: Any) -> None:
                super().__init__(stream)
                self.open_nodes: set[int] = set()

            def compose_node(self, parent: Any, index: Any) -> Any:
                # The collections being composed are exactly the parents of the calls on the
                # stack: an alias to one of them would make the value contain itself.
                open_nodes = self.open_nodes
                event = self.peek_event()
                if isinstance(event, yaml.AliasEvent) and id(
                    self.anchors.get(event.anchor)
                ) in open_nodes | {id(parent)}:
                    raise yaml.composer.ComposerError(
                        None,
                        None,
                        f"the alias *{event.anchor} refers to a node that contains "
                        "it (a recursive alias)",
                        event.start_mark,
                    )
                if parent is None:
                    return super().compose_node(parent, index)
                open_nodes.add(id(parent))
                try:
                    return super().compose_node(parent, index)
                finally:
                    open_nodes.discard(id(parent))

            def construct_mapping(self, node: Any, deep: bool = False) -> Any:
                seen: set[Any] = set()
                for key_node, _ in node.value:
                    key = self.construct_object(key_node, deep=deep)
                    if isinstance(key, str | int | float | bool) and key in seen:
                        raise yaml.constructor.ConstructorError(
                            "while reading a mapping",
                            node.start_mark,
                            f"the key {key!r} is given twice",
                            key_node.start_mark,
                        )
                    seen.add(key)
                return super().construct_mapping(node, deep=deep)

        resolvers = {
            first: [(tag, regexp) for tag, regexp in entries if tag != "tag:yaml.org,2002:bool"]
            for first, entries in yaml.SafeLoader.yaml_implicit_resolvers.items()
        }
        MachineLoader.yaml_implicit_resolvers = resolvers
        MachineLoader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL_12, list("tTfF"))
        _LOADER = MachineLoader
    return _LOADER


def _check_expansion(yaml: Any, root: Any, source: str) -> None:
    """Refuse a document whose aliases expand it beyond ``MAX_YAML_NODES`` nodes (each node's
    expanded size is computed once, so this is linear in the document as written; the loader
    has refused recursive aliases, so the nodes form no cycle)."""
    sizes: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(yaml, node)
        if not done:
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
            continue
        size = 1 + sum(sizes.get(id(c), 1) for c in children)
        if size > MAX_YAML_NODES:
            raise MachineDefinitionError(
                [
                    f"{source}:{node.start_mark.line + 1}: aliases expand "
                    f"this YAML beyond {MAX_YAML_NODES} nodes"
                ]
            )
        sizes[id(node)] = size


def _children(yaml: Any, node: Any) -> list[Any]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def load_machine(path: str | Path, **implementations: Any) -> Machine:
    """``create_machine`` for a config file; keyword arguments as ``create_machine``'s."""
    return create_machine(read_config(path), **implementations)
