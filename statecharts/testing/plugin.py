"""pytest plugin: fixtures for actors on a ``SimulatedClock`` and ``--statecharts-coverage``.

Registered through the ``pytest11`` entry point (``statecharts = "statecharts.testing.plugin"``)
or with ``-p statecharts.testing.plugin``. Fixtures:

* ``sim_clock``: a fresh ``SimulatedClock`` at time 0;
* ``start_actor``: ``start_actor(machine, **create_actor_options)`` creates and starts an actor
  on ``sim_clock`` and stops it after the test.

With ``--statecharts-coverage`` every machine the test session runs (through actors,
``machine.transition``, ``fire_timer`` or ``initial_transition``) is watched, and the terminal
summary lists, per machine, the states never active and the transitions never taken.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ..actor import Actor, create_actor
from ..clock import SimulatedClock
from ..events import normalize_event
from ..machine import Machine, fixed_clock
from .coverage import CoverageRecorder, all_states, all_transitions

OPTION = "--statecharts-coverage"
_KEY = pytest.StashKey["CoverageWatch"]()


class CoverageWatch:
    """Wraps the engine's ``Machine.start`` / ``transition`` / ``step`` / ``deliver_timer`` for
    the session and records, per machine definition, what they reached. ``close()`` undoes the
    wrapping."""

    def __init__(self) -> None:
        self.recorders: dict[str, CoverageRecorder] = {}
        self._patch = pytest.MonkeyPatch()
        original_start = Machine.start
        original_step = Machine.step
        original_deliver = Machine.deliver_timer

        def start(
            machine: Machine, input: Any, now: Callable[[], int], trace: list[Any] | None = None
        ) -> Any:
            own = [] if trace is None else trace
            result = original_start(machine, input, now, own)
            self._record(machine, None, result[0], own)
            return result

        def step(
            machine: Machine,
            snapshot: Any,
            event: Any,
            now: Callable[[], int],
            trace: list[Any] | None = None,
        ) -> Any:
            own = [] if trace is None else trace
            result = original_step(machine, snapshot, event, now, own)
            self._record(machine, snapshot, result[0], own)
            return result

        def deliver_timer(
            machine: Machine,
            snapshot: Any,
            timer_id: str,
            now: Callable[[], int],
            trace: list[Any] | None = None,
        ) -> Any:
            own = [] if trace is None else trace
            result = original_deliver(machine, snapshot, timer_id, now, own)
            self._record(machine, snapshot, result[0], own)
            return result

        def transition(machine: Machine, snapshot: Any, event: Any, now: int | None = None) -> Any:
            # what ``Machine.transition`` is defined as, so that the wrapped ``step`` sees
            # every event (the engine's own takes compiled routes without calling ``step``)
            return machine.step(snapshot, normalize_event(event), fixed_clock(now))

        self._patch.setattr(Machine, "start", start)
        self._patch.setattr(Machine, "transition", transition)
        self._patch.setattr(Machine, "step", step)
        self._patch.setattr(Machine, "deliver_timer", deliver_timer)

    def _recorder(self, machine: Machine) -> CoverageRecorder:
        key = f"{machine.id}@{machine.fingerprint}"
        found = self.recorders.get(key)
        if found is None:
            found = self.recorders[key] = CoverageRecorder(machine)
        return found

    def _record(self, machine: Machine, before: Any, snapshot: Any, trace: list[Any]) -> None:
        self._recorder(machine).macrostep(before, trace, snapshot)

    def close(self) -> None:
        """Restore the engine's methods."""
        self._patch.undo()

    def summary(self) -> list[str]:
        """Report lines, one block per machine, sorted by machine id. Definitions of one id
        with the same states and transitions (they differ only in, say, the initial context
        or the implementations, which change the fingerprint) are one machine to cover: their
        records are merged. Where they differ, each block names its fingerprint."""
        merged: dict[tuple[str, tuple[str, ...], tuple[str, ...]], CoverageRecorder] = {}
        for key in sorted(self.recorders):
            recorder = self.recorders[key]
            shape = (
                recorder.machine.id,
                all_states(recorder.machine),
                all_transitions(recorder.machine),
            )
            if shape not in merged:
                merged[shape] = CoverageRecorder(recorder.machine)
            merged[shape].merge(recorder)
        per_id = Counter(machine_id for machine_id, _, _ in merged)
        lines: list[str] = []
        for (machine_id, _, _), recorder in sorted(merged.items(), key=lambda item: item[0][0]):
            report = recorder.report()
            if per_id[machine_id] > 1:
                report.variant = f" (fingerprint {recorder.machine.fingerprint[:12]})"
            lines += report.format().splitlines()
        return lines


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--statecharts-coverage``."""
    group = parser.getgroup("statecharts")
    group.addoption(
        OPTION,
        action="store_true",
        default=False,
        help="report the states and transitions of every statechart the tests "
        "ran that were never reached",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Start watching machines when the option is on."""
    if config.getoption(OPTION, default=False):
        config.stash[_KEY] = CoverageWatch()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop watching."""
    watch = config.stash.get(_KEY, None)
    if watch is not None:
        watch.close()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Print the coverage report."""
    watch = config.stash.get(_KEY, None)
    if watch is None:
        return
    terminalreporter.section("statecharts coverage")
    lines = watch.summary()
    for line in lines or ["no statechart ran"]:
        terminalreporter.write_line(line)


@pytest.fixture
def sim_clock() -> SimulatedClock:
    """A simulated clock at time 0 (advance it with ``sim_clock.advance(ms)``)."""
    return SimulatedClock()


@pytest.fixture
def start_actor(sim_clock: SimulatedClock) -> Iterator[Callable[..., Actor]]:
    """``start_actor(machine, **options)``: a started actor on ``sim_clock``, stopped after
    the test."""
    actors: list[Actor] = []

    def start(machine: Machine, **options: Any) -> Actor:
        actor = create_actor(machine, clock=options.pop("clock", sim_clock), **options)
        actors.append(actor)
        return actor.start()

    yield start
    for actor in actors:
        actor.stop()
