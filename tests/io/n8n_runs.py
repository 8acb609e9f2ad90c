"""Running an imported workflow on the engine with recording actors (for the tests)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statecharts import Actor, SimulatedClock, create_actor, create_machine
from statecharts.io.n8n import N8nImport
from statecharts.io.n8n.runtime import PROVIDED
from statecharts.io.n8n.validation import placeholder_implementations


class Run:
    """A started actor for an imported workflow whose node actors record their calls."""

    def __init__(self, result: N8nImport, outputs: dict[str, Any] | None = None,
                 failing: dict[str, int] | None = None,
                 guards: dict[str, Callable[..., bool]] | None = None) -> None:
        self.calls: list[tuple[str, int]] = []
        self.clock = SimulatedClock()
        impls = placeholder_implementations(result)
        outputs = outputs or {}
        failing = dict(failing or {})
        for name in [n for n in impls["actors"] if n not in PROVIDED["actors"]]:
            impls["actors"][name] = self._actor(name, outputs.get(name), failing)
        impls["guards"].update(guards or {})
        machine = create_machine(result.config, guards=impls["guards"],
                                 actions=impls["actions"], actors=impls["actors"],
                                 delays=impls["delays"])
        self.actor: Actor = create_actor(machine, clock=self.clock).start()

    def _actor(self, name: str, output: Any, failing: dict[str, int]) -> Callable[[Any], Any]:
        def work(data: Any) -> Any:
            self.calls.append((name, self.clock.now()))
            if failing.get(name, 0) != 0:  # fail this many times (-1: always)
                failing[name] -= 1
                raise ConnectionError(f"{name} is down")
            return output

        return work

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    @property
    def snapshot(self) -> Any:
        return self.actor.get_snapshot()
