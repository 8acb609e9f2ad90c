"""The runtime as the parts it hosts see it: what a run driver and its step planner read of the
`Runtime` that makes them (`persistence.Runtime` is one), as a narrow interface below both.

The runtime imports the driver (it folds sent events' steps with one, `Runtime.send`); the
driver and the planner import only this, so the import graph has no circle and each part
names exactly what it uses of the runtime.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from persistence.breakers import SharedBreaker
from persistence.capacity import LoadControl
from persistence.outbox import Listener
from persistence.resting import Resting
from persistence.stores import NewEffect, NewRun, RunRecord, Store
from persistence.telemetry import Telemetry
from statecharts import Machine
from statecharts.effects import Effect


class Now(Protocol):
    """A clock: `now()` in epoch milliseconds (`persistence.runtime.Clock`)."""

    def now(self) -> int:
        """Current time, epoch milliseconds."""
        ...


class Backoff(Protocol):
    """How a transient failure releases its run (`persistence.runtime.TransientBackoff`)."""

    @property
    def max_attempts(self) -> int:
        """Transient failures in a row after which the run fails."""
        ...

    def wait_ms(self, attempt: int) -> int:
        """The wait after transient failure number `attempt` (1-based)."""
        ...

    def attempt_after(self, run: RunRecord) -> int:
        """The number of this transient failure, from the row."""
        ...


class Host(Protocol):
    """What a driver and its planner read of their runtime: its store, clock, telemetry, load
    control and resting runs, its definitions and settings, and the runs a step starts."""

    @property
    def store(self) -> Store: ...

    @property
    def clock(self) -> Now: ...

    @property
    def telemetry(self) -> Telemetry: ...

    @property
    def load(self) -> LoadControl: ...

    @property
    def resting(self) -> Resting: ...

    @property
    def transient(self) -> Backoff: ...

    @property
    def listeners(self) -> Mapping[str, list[Listener]]: ...

    @property
    def dry_run(self) -> bool: ...

    @property
    def journal(self) -> bool: ...

    @property
    def search_fields(self) -> Mapping[str, Sequence[str]]: ...

    def breaker(self, name: str) -> SharedBreaker:
        """The shared circuit breaker `name`."""
        ...

    def machine_for(self, run: RunRecord) -> Machine | None:
        """The definition that can step `run`, or None."""
        ...

    def child_runs(
        self,
        parent_id: str,
        parent_key: str | None,
        starts: Iterable[Effect],
        now: int,
        traceparent: str | None = None,
    ) -> list[tuple[NewRun, list[NewEffect]]]:
        """The child runs a step's `StartChild` effects create, in insertion order."""
        ...

    def error_run(
        self, run: RunRecord, state: str, error: str | None, now: int
    ) -> list[tuple[NewRun, list[NewEffect]]]:
        """The error-workflow run to start when `run` fails (empty if none)."""
        ...
