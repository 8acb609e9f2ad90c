"""Reading an n8n workflow export: nodes, connections and settings, checked once.

Real exports vary: template copies hold only ``nodes`` and ``connections``, old exports have
nodes without ``id`` (connections always refer to node *names*), an output slot may be
``null``, ``settings.executionOrder`` may be missing (legacy order). All of that is accepted.
What cannot be understood raises ``N8nFormatError`` naming the JSON path (a node without a
name, wires that are not lists); a malformed node setting is a warning naming its path, and
the setting takes n8n's default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .naming import json_path

ON_ERROR_VALUES = ("stopWorkflow", "continueRegularOutput", "continueErrorOutput")
STICKY_NOTE = "n8n-nodes-base.stickyNote"


class N8nFormatError(ValueError):
    """The export is not a workflow we can read; ``path`` names the offending JSON value."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path or '<root>'}: {message}")
        self.path = path
        self.message = message


@dataclass(frozen=True)
class Node:
    """One node of the canvas, with the per-node settings n8n keeps outside ``parameters``."""

    index: int
    name: str
    type: str
    type_version: float
    parameters: Mapping[str, Any]
    path: str
    disabled: bool = False
    position: tuple[float, float] = (0.0, 0.0)
    retry_on_fail: bool = False
    max_tries: float | None = None
    wait_between_tries: float | None = None
    on_error: str | None = None
    continue_on_fail: bool = False
    always_output_data: bool = False
    execute_once: bool = False

    @property
    def short_type(self) -> str:
        """``"n8n-nodes-base.httpRequest"`` -> ``"httpRequest"``."""
        return self.type.rsplit(".", 1)[-1]

    @property
    def is_sticky_note(self) -> bool:
        """Sticky notes are canvas comments, not steps."""
        return self.type == STICKY_NOTE

    def param_path(self, *keys: str | int) -> str:
        """The JSON path of a parameter, for error messages."""
        path = json_path(self.path, "parameters")
        for key in keys:
            path = json_path(path, key)
        return path


@dataclass(frozen=True)
class Connection:
    """One wire: ``source`` output ``output`` of kind ``kind`` into ``target`` input ``input``."""

    source: str
    kind: str
    output: int
    target: str
    input: int
    path: str


@dataclass(frozen=True)
class Workflow:
    """A checked export. ``warnings`` lists what was accepted but ignored (dangling wires)."""

    name: str | None
    nodes: tuple[Node, ...]
    connections: tuple[Connection, ...]
    execution_order: str
    error_workflow: str | None
    warnings: tuple[str, ...] = field(default=())

    def node(self, name: str) -> Node:
        """The node called ``name``."""
        return self._by_name[name]

    def has_node(self, name: str) -> bool:
        """True when a node is called ``name``."""
        return name in self._by_name

    @cached_property
    def _by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}


def parse_workflow(data: Any) -> Workflow:
    """Check ``data`` (a parsed n8n export) and return it as a ``Workflow``."""
    if not isinstance(data, Mapping):
        raise N8nFormatError("", f"an n8n workflow export is a JSON object, not {_type_name(data)}")
    if "nodes" not in data:
        raise N8nFormatError("nodes", "missing: an n8n workflow export has a 'nodes' list")
    raw_nodes = data["nodes"]
    if not isinstance(raw_nodes, list):
        raise N8nFormatError("nodes", f"expected a list of nodes, got {_type_name(raw_nodes)}")
    warnings: list[str] = []
    nodes = tuple(_node(raw, i, warnings) for i, raw in enumerate(raw_nodes))
    _check_unique_names(nodes)
    connections = _connections(data.get("connections", {}), {n.name for n in nodes}, warnings)
    settings = data.get("settings")
    if settings is None:
        settings = {}
    if not isinstance(settings, Mapping):
        raise N8nFormatError("settings", f"expected an object, got {_type_name(settings)}")
    order = settings.get("executionOrder", "v0")
    if not isinstance(order, str):
        raise N8nFormatError("settings.executionOrder", f"expected a string, got {order!r}")
    error_workflow = settings.get("errorWorkflow")
    if error_workflow is not None and not isinstance(error_workflow, str):
        raise N8nFormatError(
            "settings.errorWorkflow", f"expected a workflow id string, got {error_workflow!r}"
        )
    name = data.get("name")
    if name is not None and not isinstance(name, str):
        raise N8nFormatError("name", f"expected a string, got {_type_name(name)}")
    return Workflow(
        name,
        nodes,
        connections,
        "v1" if order == "v1" else "legacy",
        error_workflow or None,
        tuple(warnings),
    )


def _node(raw: Any, index: int, warnings: list[str]) -> Node:
    """One node. Its name and type identify it (wires name nodes), so they must be sound;
    a malformed setting is reported in ``warnings`` and read as n8n's default, so one bad
    node does not refuse the workflow."""
    path = f"nodes[{index}]"
    if not isinstance(raw, Mapping):
        raise N8nFormatError(path, f"expected a node object, got {_type_name(raw)}")
    name = _required_string(raw, "name", path)
    node_type = _required_string(raw, "type", path)

    def setting(read: Callable[[], Any], default: Any) -> Any:
        try:
            return read()
        except N8nFormatError as exc:
            warnings.append(f"{exc} (node {name!r}: n8n's default used)")
            return default

    version = raw.get("typeVersion", 1)
    if not _is_number(version):
        warnings.append(
            f"{json_path(path, 'typeVersion')}: expected a number, got "
            f"{version!r} (node {name!r}: version 1 used)"
        )
        version = 1
    parameters = raw.get("parameters")
    if parameters is None:
        parameters = {}
    if not isinstance(parameters, Mapping):
        warnings.append(
            f"{json_path(path, 'parameters')}: expected an object, got "
            f"{_type_name(parameters)} (node {name!r}: no parameters used)"
        )
        parameters = {}
    on_error = raw.get("onError")
    if on_error is not None and on_error not in ON_ERROR_VALUES:
        warnings.append(
            f"{json_path(path, 'onError')}: expected one of "
            f"{', '.join(ON_ERROR_VALUES)}, got {on_error!r} (node {name!r}: "
            "stopWorkflow used)"
        )
        on_error = None
    return Node(
        index=index,
        name=name,
        type=node_type,
        type_version=float(version),
        parameters=parameters,
        path=path,
        disabled=setting(lambda: _flag(raw, "disabled", path), False),
        position=setting(
            lambda: _position(raw.get("position"), json_path(path, "position")), (0.0, 0.0)
        ),
        retry_on_fail=setting(lambda: _flag(raw, "retryOnFail", path), False),
        max_tries=setting(lambda: _optional_number(raw, "maxTries", path), None),
        wait_between_tries=setting(lambda: _optional_number(raw, "waitBetweenTries", path), None),
        on_error=on_error,
        continue_on_fail=setting(lambda: _flag(raw, "continueOnFail", path), False),
        always_output_data=setting(lambda: _flag(raw, "alwaysOutputData", path), False),
        execute_once=setting(lambda: _flag(raw, "executeOnce", path), False),
    )


def _check_unique_names(nodes: tuple[Node, ...]) -> None:
    seen: dict[str, Node] = {}
    for node in nodes:
        if node.name in seen:
            raise N8nFormatError(
                json_path(node.path, "name"),
                f"duplicate node name {node.name!r} (also "
                f"{seen[node.name].path}); connections refer to nodes by name",
            )
        seen[node.name] = node


def _connections(raw: Any, names: set[str], warnings: list[str]) -> tuple[Connection, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise N8nFormatError(
            "connections", f"expected an object keyed by node name, got {_type_name(raw)}"
        )
    result: list[Connection] = []
    for source, kinds in raw.items():
        source_path = json_path("connections", str(source))
        if not isinstance(kinds, Mapping):
            raise N8nFormatError(
                source_path, f"expected an object of connection types, got {_type_name(kinds)}"
            )
        if source not in names:
            warnings.append(
                f"{source_path}: no node is called {source!r}; its connections were ignored"
            )
            continue
        for kind, outputs in kinds.items():
            kind_path = json_path(source_path, str(kind))
            if outputs is None:
                continue
            if not isinstance(outputs, list):
                raise N8nFormatError(
                    kind_path, f"expected a list of outputs, got {_type_name(outputs)}"
                )
            for output, wires in enumerate(outputs):
                result += _wires(
                    source, str(kind), output, wires, f"{kind_path}[{output}]", names, warnings
                )
    return tuple(result)


def _wires(
    source: str, kind: str, output: int, wires: Any, path: str, names: set[str], warnings: list[str]
) -> list[Connection]:
    if wires is None:  # real exports write null for an output with nothing attached
        return []
    if not isinstance(wires, list):
        raise N8nFormatError(
            path, f"expected a list of connections or null, got {_type_name(wires)}"
        )
    found = []
    for i, wire in enumerate(wires):
        wire_path = f"{path}[{i}]"
        if not isinstance(wire, Mapping):
            raise N8nFormatError(wire_path, f"expected a connection object, got {_type_name(wire)}")
        target = _required_string(wire, "node", wire_path)
        index = wire.get("index", 0)
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise N8nFormatError(
                json_path(wire_path, "index"), f"expected an input index (0, 1, ...), got {index!r}"
            )
        if target not in names:
            warnings.append(
                f"{json_path(wire_path, 'node')}: no node is called {target!r}; "
                "the connection was ignored"
            )
            continue
        if not isinstance(wire.get("type", kind), str):
            raise N8nFormatError(
                json_path(wire_path, "type"),
                f"expected a connection type string, got {wire['type']!r}",
            )
        found.append(Connection(source, kind, output, target, index, wire_path))
    return found


def _required_string(raw: Mapping[str, Any], key: str, path: str) -> str:
    value = raw.get(key)
    if value is None:
        raise N8nFormatError(json_path(path, key), "missing")
    if not isinstance(value, str) or not value:
        raise N8nFormatError(json_path(path, key), f"expected a non-empty string, got {value!r}")
    return value


def _flag(raw: Mapping[str, Any], key: str, path: str) -> bool:
    value = raw.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise N8nFormatError(json_path(path, key), f"expected true or false, got {value!r}")
    return value


def _optional_number(raw: Mapping[str, Any], key: str, path: str) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    if not _is_number(value):
        raise N8nFormatError(json_path(path, key), f"expected a number, got {value!r}")
    return float(value)


def _position(value: Any, path: str) -> tuple[float, float]:
    if value is None:
        return (0.0, 0.0)
    if not isinstance(value, list) or len(value) != 2 or not all(_is_number(v) for v in value):
        raise N8nFormatError(path, f"expected [x, y], got {value!r}")
    return (float(value[0]), float(value[1]))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _type_name(value: Any) -> str:
    names = {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }
    return names.get(type(value), type(value).__name__)
