"""Checking a machine config on its own, without the code that implements it.

A workflow file names guards, actions, actors and delays that the application's code provides
(``create_machine(config, guards=..., ...)``). ``check_config`` separates the two kinds of
finding: a structural problem (a bad target, an unknown key, a malformed retry) is raised as
``MachineDefinitionError``; a name the file refers to is returned as what the file *expects*
the code to provide, each with the path where the file names it. Given the implementations,
every name must resolve, exactly as ``create_machine`` requires.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .definition import Implementations
from .errors import MachineDefinitionError, MissingImplementation
from .logic import from_callable
from .machine import Machine


@dataclass(frozen=True)
class ConfigCheck:
    """A config that is structurally sound: the machine built from it (with stand-ins for
    anything the code must provide) and those expected implementations, in file order."""

    machine: Machine
    expected: tuple[MissingImplementation, ...]


def check_config(
    config: Mapping[str, Any], implementations: Implementations | None = None
) -> ConfigCheck:
    """Check ``config``'s structure; raise ``MachineDefinitionError`` for a structural problem.

    Without ``implementations`` every named guard, action, actor and delay is reported in
    ``expected`` rather than as a problem. With them, a name they lack is a problem as in
    ``create_machine`` (and ``expected`` is empty).
    """
    if implementations is not None:
        return ConfigCheck(Machine(config, implementations), ())
    try:
        return ConfigCheck(Machine(config, Implementations()), ())
    except MachineDefinitionError as exc:
        if not exc.missing:
            raise
        expected = exc.missing
    # Built again with stand-ins so every check behind a missing name (its params, a retry
    # around the call) runs too: what is still wrong now is wrong in the file itself.
    return ConfigCheck(Machine(config, _stand_ins(expected)), expected)


def _stand_ins(expected: tuple[MissingImplementation, ...]) -> Implementations:
    def names(kind: str) -> list[str]:
        return [e.name for e in expected if e.kind == kind]

    return Implementations(
        guards={name: _never for name in names("guard")},
        actions={name: _nothing for name in names("action")},
        actors={name: from_callable(_nothing, name) for name in names("actor")},
        delays=dict.fromkeys(names("delay"), 0),
    )


def _never(*_: Any) -> bool:
    return False


def _nothing(*_: Any) -> None:
    return None
