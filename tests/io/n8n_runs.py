"""Running an imported workflow on the engine with recording actors (for the tests)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statecharts import Actor, SimulatedClock, create_actor, create_machine
from statecharts.io.n8n import N8nImport
from statecharts.io.n8n.runtime import PROVIDED, machine_config
from statecharts.io.n8n.validation import placeholder_implementations


class Run:
    """A started actor for an imported workflow whose node actors record their calls.

    ``outputs`` maps an actor to what it returns: a value, or a function of the items it
    got; an actor not listed passes its items on (a router: all of them to output 0).
    ``failing`` maps an actor to how many times it fails first (-1: always)."""

    def __init__(
        self,
        result: N8nImport,
        outputs: dict[str, Any] | None = None,
        failing: dict[str, int] | None = None,
    ) -> None:
        self.calls: list[tuple[str, int]] = []
        self.inputs: dict[str, list[Any]] = {}
        self.clock = SimulatedClock()
        impls = placeholder_implementations(result)
        outputs = outputs or {}
        failing = dict(failing or {})
        routers = {
            i.name
            for i in result.implementations
            if i.kind == "actor" and (i.signature or "").endswith("|list[Items]")
        }
        for name in [n for n in impls["actors"] if n not in PROVIDED["actors"]]:
            impls["actors"][name] = self._actor(
                name, outputs.get(name, _PASS), failing, name in routers
            )
        machine = create_machine(
            machine_config(result.config),
            guards=impls["guards"],
            actions=impls["actions"],
            actors=impls["actors"],
            delays=impls["delays"],
        )
        self.actor: Actor = create_actor(machine, clock=self.clock).start()

    def _actor(
        self, name: str, output: Any, failing: dict[str, int], router: bool
    ) -> Callable[[Any], Any]:
        def work(data: Any) -> Any:
            self.calls.append((name, self.clock.now()))
            self.inputs.setdefault(name, []).append(data)
            if failing.get(name, 0) != 0:  # fail this many times (-1: always)
                failing[name] -= 1
                raise ConnectionError(f"{name} is down")
            if output is _PASS:
                return [data] if router else data
            return output(data) if callable(output) else output

        return work

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    @property
    def snapshot(self) -> Any:
        return self.actor.get_snapshot()


_PASS = object()


def items(*values: dict[str, Any]) -> list[dict[str, Any]]:
    """n8n items: one ``{"json": value}`` per value."""
    return [{"json": value} for value in values]


def to_output(index: int, count: int = 2) -> Callable[[Any], Any]:
    """A router actor sending every item it gets to output ``index`` of ``count``."""

    def route(data: Any) -> Any:
        result: list[Any] = [[] for _ in range(count)]
        result[index] = data
        return result

    return route
