"""Load control: named limits on calls and runs, shared by every worker through the store.

An invoke names the limit its calls go through with `limit: "crm"`; the runtime says what the
limit is: `Runtime(limits={"crm": Limit(max_in_flight=4, calls=10, per_ms=1000)})`. A whole
workflow can be limited too (`workflow_limits={"backfill": "nightly"}`: at most that many of its
runs stepped at once). Before a worker makes a limited call it asks the store for a place:

- **concurrency** (`max_in_flight`): a slot, held while the call runs and given back on every
  path (done, failed, raised); a SIGKILLed holder's slot comes back when its run's lease expires;
- **rate** (`calls` per `per_ms`): a sliding window, at most `calls` calls started in any
  `per_ms` (as the store's clock sees it);
- **pause**: a failed call whose error carries `retry_after` (ms; `Retry-After` mapped by the
  HTTP edge) pauses the limit for every run until then, not only for the run that was told.

A call site naming a limit the runtime was not given is not capped (an INFO line names it) but
still paused by a Retry-After, so naming the downstream is useful on its own.

A run that gets no place does not block a thread: it is released at once, with "waiting for
capacity: crm" (or "rate limited: crm", "paused by Retry-After: crm") on its row, and queued in
arrival order; a freed slot is handed to the first run in the queue: leased at once to the
worker that freed it, which steps it next (no claim, no wake-up), or else woken. Nothing of the
step is lost or repeated: the call had not started.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from persistence.outbox import Executed, invoke_of
from persistence.stores import RunRecord, Store
from persistence.stores.base import MAX_PRIORITY, Grant, Handover
from statecharts import Machine

log = logging.getLogger("statecharts.capacity")


@dataclass(frozen=True)
class Limit:
    """What a named limit allows: at most `max_in_flight` calls at once, at most `calls` calls
    started in any `per_ms` window, or both. `recheck_ms`: how long a queued run sleeps before
    it looks again on its own. A freed slot is handed over and its run woken at once, a dead
    holder's slot comes back when its run is claimed again, and every worker hands over slots
    freed by expired leases now and then (`LoadControl.sweep`), so this is only the last safety
    net; kept long, because every queued run looks again that often (a herd of its own)."""

    max_in_flight: int | None = None
    calls: int | None = None
    per_ms: int = 1000
    recheck_ms: int = 3_600_000

    def __post_init__(self) -> None:
        if self.max_in_flight is None and self.calls is None:
            raise ValueError("a Limit needs max_in_flight, calls (per per_ms), or both")
        for name in ("max_in_flight", "calls", "per_ms", "recheck_ms"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value < 1):  # fmt: skip
                raise ValueError(f"Limit.{name} must be an integer >= 1, not {value!r}")


class _PausesOnly:
    """A limit named by a call site but not configured: no cap, only Retry-After pauses."""

    max_in_flight: int | None = None
    calls: int | None = None
    per_ms = 1000
    recheck_ms = 3_600_000


_PAUSES_ONLY = _PausesOnly()


def check_priority(priority: Any, where: str) -> int:
    """A run's priority: an integer from 0 (the default) to `MAX_PRIORITY`, higher first."""
    if not isinstance(priority, int) or isinstance(priority, bool) or \
            not 0 <= priority <= MAX_PRIORITY:  # fmt: skip
        raise ValueError(f"{where}: a priority is an integer from 0 to {MAX_PRIORITY}, "
                         f"not {priority!r}")
    return priority


Place = tuple[str, str]
"""(limit name, holder): a call's outbox key, or `run:<id>` for a workflow's limit."""


class LoadControl:
    """The runtime's limits, checked against its machines, asked of its store."""

    def __init__(self, store: Store, machines: Sequence[Machine], limits: Mapping[str, Limit],
                 workflow_limits: Mapping[str, str]) -> None:  # fmt: skip
        self.store = store
        self.limits = dict(limits)
        self.workflow_limits = dict(workflow_limits)
        for name, limit in self.limits.items():
            if not isinstance(limit, Limit):
                raise TypeError(f"limits[{name!r}] must be a Limit, not {type(limit).__name__}")
        known = ", ".join(sorted(self.limits)) or "none"
        self.named = set(self.limits)
        for machine in machines:
            for invoke in (i for n in machine.definition.nodes for i in n.invoke):
                if invoke.limit is not None and invoke.limit not in self.limits:
                    log.info("machine %r: %s.limit: no limit %r in Runtime(limits=...) "
                                "(known: %s): its calls are not capped, only paused by a "
                                "Retry-After", machine.id, invoke.config_path, invoke.limit,
                                known)  # fmt: skip
                if invoke.limit is not None:
                    self.named.add(invoke.limit)
        ids = {m.id for m in machines}
        for workflow, name in self.workflow_limits.items():
            if workflow not in ids:
                raise ValueError(f"workflow_limits[{workflow!r}]: no such workflow")
            if name not in self.limits:
                raise ValueError(f"workflow_limits[{workflow!r}]: no limit {name!r} in "
                                 f"Runtime(limits=...) (known: {known})")  # fmt: skip

    def places(self, machine: Machine, pending: Sequence[tuple[str, str, Any]]) -> list[Place]:
        """The limited calls among a run's pending effects (key, kind, payload)."""
        if not self.named:
            return []
        found = []
        for key, kind, payload in pending:
            if kind == "start_child":
                invoke = invoke_of(machine, payload)
                if invoke is not None and invoke.limit is not None:
                    found.append((invoke.limit, key))
        return found

    def calls_beside(self, workflow_name: str) -> bool:
        """Whether a workflow's calls run beside its runs (`persistence.calls`): not in a limited
        workflow, whose runs take their place for each step and make their calls in it."""
        return workflow_name not in self.workflow_limits

    def workflow_place(self, run: RunRecord) -> Place | None:
        """The place a run of a limited workflow needs to be stepped."""
        name = self.workflow_limits.get(run.workflow_name)
        return None if name is None else (name, f"run:{run.id}")

    def enter(self, run: RunRecord, owner: str, places: Sequence[Place], now: int,
              lease_ms: int) -> Grant:  # fmt: skip
        """Take every place or none: a refused one gives back those taken, and the run (already
        released by the store) waits for what the refusal says."""
        taken: list[Place] = []
        for name, holder in places:
            limit = self.limits.get(name, _PAUSES_ONLY)
            grant = self.store.acquire_capacity(
                name, holder, run.id, owner, now, max_in_flight=limit.max_in_flight,
                calls=limit.calls, per_ms=limit.per_ms, recheck_ms=limit.recheck_ms,
                lease_ms=lease_ms)  # fmt: skip
            if not grant.granted:
                self.leave(taken, now, lease_ms)
                return grant
            taken.append((name, holder))
        return Grant(True)

    def leave(self, places: Sequence[Place], now: int, lease_ms: int,
              owner: str | None = None) -> list[tuple[str, Handover]]:  # fmt: skip
        """Give the slots back. With `owner` (a worker that steps what it is given at once),
        each goes straight to the next queued run, leased to `owner`: those runs are returned
        with the limit they hold a slot of. Otherwise the next queued runs are woken."""
        handed: list[tuple[str, Handover]] = []
        for name, holder in places:
            limit = self.limits.get(name, _PAUSES_ONLY)
            if limit.max_in_flight is not None:
                handed += ((name, h) for h in self.store.release_capacity(
                    name, [holder], now, max_in_flight=limit.max_in_flight, lease_ms=lease_ms,
                    owner=owner))  # fmt: skip
        return handed

    def sweep(self, now: int, lease_ms: int) -> None:
        """Hand slots freed by expired leases (and reservations nobody came for) to the queues'
        heads: what a release would have done had the holder lived to make it."""
        for name, limit in sorted(self.limits.items()):
            if limit.max_in_flight is not None:
                self.store.release_capacity(name, [], now, max_in_flight=limit.max_in_flight,
                                            lease_ms=lease_ms)  # fmt: skip

    def pause_after(self, places: Sequence[Place], done: Sequence[Executed], now: int) -> None:
        """A limited call that failed with a `retry_after` pauses its limit for everyone."""
        by_key = {holder: name for name, holder in places}
        for executed in done:
            name = by_key.get(executed.outcome.idempotency_key)
            wait = retry_after(executed)
            if name is not None and wait is not None:
                self.store.pause_capacity(name, now + wait, now)


def retry_after(executed: Executed) -> int | None:
    """The `retry_after` (ms) a failed call's error carried, if any."""
    error = (executed.event or {}).get("error") if executed.outcome.status == "failed" else None
    wait = error.get("retry_after") if isinstance(error, Mapping) else None
    if isinstance(wait, int | float) and not isinstance(wait, bool) and wait > 0:
        return int(wait)
    return None

