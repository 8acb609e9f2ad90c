"""Building the imported configs with the engine, before anyone fills in the skeleton.

``create_machine`` checks every target, guard, action, actor and delay name, so each import is
validated with placeholder implementations that raise ``NotImplementedError`` if ever run, plus
the real ones ``runtime.PROVIDED`` has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statecharts.machine import Machine, create_machine

from .importer import N8nImport
from .runtime import PROVIDED, machine_config


def placeholder_implementations(result: N8nImport) -> dict[str, dict[str, Any]]:
    """``create_machine`` keyword arguments for ``result`` with placeholders for everything
    the user has to write."""
    tables: dict[str, dict[str, Any]] = {key: dict(value) for key, value in PROVIDED.items()}
    for impl in result.implementations:
        if not impl.provided:
            tables[impl.kind + "s"][impl.name] = _placeholder(impl.kind, impl.name)
    return tables


def build_machines(result: N8nImport) -> tuple[Machine, Machine | None]:
    """The primary machine and the error machine (or None), validated by the engine; raises
    ``MachineDefinitionError`` listing every problem."""
    impls = placeholder_implementations(result)

    def build(config: dict[str, Any]) -> Machine:
        return create_machine(
            machine_config(config),
            guards=impls["guards"],
            actions=impls["actions"],
            actors=impls["actors"],
            delays=impls["delays"],
        )

    return build(result.config), build(result.error_config) if result.error_config else None


def _placeholder(kind: str, name: str) -> Callable[..., Any]:
    def not_written(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{kind} {name!r} is not implemented yet")

    not_written.__name__ = name
    return not_written
