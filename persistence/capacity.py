"""Load control: named limits on calls and runs, shared by every worker through the store.

An invoke names the limit its calls go through with `limit: "crm"`; the runtime says what the
limit is: `Runtime(limits={"crm": Limit(max_in_flight=4, calls=10, per_ms=1000)})`. A whole
workflow can be limited too (`workflow_limits={"backfill": "nightly"}`: at most that many of its
runs stepped at once). Before a worker makes a limited call it asks the store for a place:

- **concurrency** (`max_in_flight`): a slot, held while the call runs and given back on every
  path (done, failed, stopped, timed out); a SIGKILLed holder's slot comes back when its lease
  (the call's) expires;
- **rate** (`calls` per `per_ms`): a sliding window, at most `calls` calls started in any
  `per_ms` (as the store's clock sees it);
- **pause**: a failed call whose error carries `retry_after` (ms; `Retry-After` mapped by the
  HTTP edge) pauses the limit for every run until then, not only for the run that was told.

A call site naming a limit the runtime was not given is not capped (an INFO line names it) but
still paused by a Retry-After, so naming the downstream is useful on its own.

A limit can be **per key** (`Limit(max_in_flight=4, key="tenant")`): each value of the run's
context field `tenant` (a dotted path, or `key=fn(context)`) has its own slots, rate window,
pause and queue, stored as the limit `tenant[<value>]`, so one tenant's backlog never takes another
tenant's places (docs/limits.md, "Per-key limits").

A limited call runs beside its run, as every call does (`persistence.calls`): its executor asks
for its places before it starts it (`call_places`: its run's when the run's workflow is limited,
then its call site's). A call that gets no place does not block a thread: it is released at once
(pending again, "waiting for capacity: crm", or "rate limited: crm", "paused by Retry-After: crm",
on its row), queued in arrival order, and made due again when a freed slot is reserved for it
or the window or pause ends; its run goes on meanwhile (its events, timers and cancel act, and
leaving the invoking state stops the call, which frees its slot and its place in the queue).
Its end gives its slot back right after it is recorded. A run of a limited workflow takes its
place before it is stepped and keeps it while any of its calls is open or a call's result is
queued for it (the step that applies it finds the place held).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from persistence.outbox import Executed, invoke_of
from persistence.stores import CallRecord, RunRecord, Store
from persistence.stores.records import Grant
from persistence.stores.rules import MAX_PRIORITY
from statecharts import Machine

log = logging.getLogger("statecharts.capacity")


@dataclass(frozen=True)
class Limit:
    """What a named limit allows: at most `max_in_flight` calls at once, at most `calls` calls
    started in any `per_ms` window, or both. `recheck_ms`: how long a queued call (or run)
    sleeps before it looks again on its own. A freed slot is reserved for the queue's head and
    it is woken at once, a dead holder's slot comes back at the next grant, and every worker
    hands over slots freed by expired leases now and then (`LoadControl.sweep`), so this is
    only the last safety net; kept long, because every queued call looks again that often (a
    herd of its own)."""

    max_in_flight: int | None = None
    calls: int | None = None
    per_ms: int = 1000
    recheck_ms: int = 3_600_000
    key: str | Callable[[Mapping[str, Any]], Any] | None = None
    """Per key: the run's context field (a dotted path, "account.id") or `fn(context)` whose
    value picks the key; each key has the whole limit to itself (its own slots, queue, rate
    window and pause). None: one limit for every run."""

    def __post_init__(self) -> None:
        if self.max_in_flight is None and self.calls is None:
            raise ValueError("a Limit needs max_in_flight, calls (per per_ms), or both")
        if isinstance(self.key, str) and (
            not self.key or any(not part for part in self.key.split("."))
        ):
            raise ValueError(
                f"Limit.key must be a dotted path of the run's context (e.g. "
                f"'tenant' or 'account.id'), not {self.key!r}"
            )
        if self.key is not None and not isinstance(self.key, str) and not callable(self.key):
            raise ValueError(
                f"Limit.key must be a context path or a callable, not {type(self.key).__name__}"
            )
        for name in ("max_in_flight", "calls", "per_ms", "recheck_ms"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 1
            ):
                raise ValueError(f"Limit.{name} must be an integer >= 1, not {value!r}")


class _PausesOnly:
    """A limit named by a call site but not configured: no cap, only Retry-After pauses."""

    max_in_flight: int | None = None
    calls: int | None = None
    per_ms = 1000
    recheck_ms = 3_600_000
    key = None


_PAUSES_ONLY = _PausesOnly()


def check_priority(priority: Any, where: str) -> int:
    """A run's priority: an integer from 0 (the default) to `MAX_PRIORITY`, higher first."""
    if (
        not isinstance(priority, int)
        or isinstance(priority, bool)
        or not 0 <= priority <= MAX_PRIORITY
    ):
        raise ValueError(
            f"{where}: a priority is an integer from 0 to {MAX_PRIORITY}, not {priority!r}"
        )
    return priority


Place = tuple[str, str]
"""(limit name, holder): a call's outbox key, or `run:<id>` for a workflow's limit. The name of
a per-key limit's place is `<limit>[<key>]` (`keyed_name`)."""

MAX_KEY_LENGTH = 200
"""The longest key value (characters) of a per-key limit: a key names a limit's row."""


class LimitKeyError(ValueError):
    """A run's context gives no usable key for a per-key limit; the message names both."""


def keyed_name(name: str, key: str) -> str:
    """The stored name of key `key`'s share of limit `name`."""
    return f"{name}[{key}]"


def split_name(stored: str) -> tuple[str, str | None]:
    """(limit, key) of a stored limit name: `tenant[acme]` -> ("tenant", "acme")."""
    base, bracket, rest = stored.partition("[")
    if bracket and rest.endswith("]"):
        return base, rest[:-1]
    return stored, None


def limit_key(name: str, limit: Limit, context: Mapping[str, Any]) -> str:
    """The key a run with `context` has in per-key limit `name` (`LimitKeyError` if none)."""
    if callable(limit.key):
        where, value = f"{getattr(limit.key, '__name__', 'key')}(context)", limit.key(context)
    else:
        where, value = f"context.{limit.key}", context
        for part in str(limit.key).split("."):
            if not isinstance(value, Mapping) or part not in value:
                raise LimitKeyError(
                    f"limit {name!r} is per key {where}: the run's context has no {where}"
                )
            value = value[part]
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        raise LimitKeyError(
            f"limit {name!r} is per key {where}: the run's {where} is "
            f"{value!r}, not a string or an integer"
        )
    text = str(value)
    if len(text) > MAX_KEY_LENGTH:
        raise LimitKeyError(
            f"limit {name!r} is per key {where}: the run's {where} is "
            f"{len(text)} characters long, over {MAX_KEY_LENGTH}"
        )
    return text


class LoadControl:
    """The runtime's limits, checked against its machines, asked of its store."""

    def __init__(
        self,
        store: Store,
        machines: Sequence[Machine],
        limits: Mapping[str, Limit],
        workflow_limits: Mapping[str, str],
    ) -> None:
        self.store = store
        self.limits = dict(limits)
        self.workflow_limits = dict(workflow_limits)
        for name, limit in self.limits.items():
            if not isinstance(limit, Limit):
                raise TypeError(f"limits[{name!r}] must be a Limit, not {type(limit).__name__}")
            if "[" in name:  # the stored names of per-key limits' shares use it
                raise ValueError(f"limits[{name!r}]: a limit's name cannot contain '['")
        known = ", ".join(sorted(self.limits)) or "none"
        self.named = set(self.limits)
        for machine in machines:
            for invoke in (i for n in machine.definition.nodes for i in n.invoke):
                if invoke.limit is not None and invoke.limit not in self.limits:
                    log.info(
                        "machine %r: %s.limit: no limit %r in Runtime(limits=...) "
                        "(known: %s): its calls are not capped, only paused by a "
                        "Retry-After",
                        machine.id,
                        invoke.config_path,
                        invoke.limit,
                        known,
                    )
                if invoke.limit is not None:
                    self.named.add(invoke.limit)
        ids = {m.id for m in machines}
        for workflow, name in self.workflow_limits.items():
            if workflow not in ids:
                raise ValueError(f"workflow_limits[{workflow!r}]: no such workflow")
            if name not in self.limits:
                raise ValueError(
                    f"workflow_limits[{workflow!r}]: no limit {name!r} in "
                    f"Runtime(limits=...) (known: {known})"
                )

    def call_places(self, machine: Machine, run: RunRecord, call: CallRecord) -> list[Place]:
        """The places a call of `run` takes before it starts: its run's (`run:<id>`) when the
        run's workflow is limited (a run counts while its calls work), then its call site's
        (held by the call's key) when the call site names a limit; per key, each in the
        share of the run's key as its row holds it now (`LimitKeyError` when it has none)."""
        found = []
        workflow = self.workflow_place(run)
        if workflow is not None:
            found.append(workflow)
        invoke = invoke_of(machine, call.payload)
        if invoke is not None and invoke.limit is not None:
            found.append((self.share(invoke.limit, _context(run)), call.idempotency_key))
        return found

    def step_places(
        self, machine: Machine, run: RunRecord, pending: Sequence[tuple[str, str, Any]]
    ) -> list[Place]:
        """The call-site places of the calls among a run's `pending` in-step effects (key,
        kind, payload): a `start_child` recorded in its run's step by a release before calls
        ran beside their runs, left pending across the upgrade, runs in the step that
        executes it and takes its call site's place first, as a call beside does (its run's
        place, for a limited workflow, the drive already holds); none for anything else."""
        found = []
        for key, kind, payload in pending:
            invoke = invoke_of(machine, payload) if kind == "start_child" else None
            if invoke is not None and invoke.limit is not None:
                found.append((self.share(invoke.limit, _context(run)), key))
        return found

    def calls_stopped(
        self, machine: Machine, run: RunRecord, invoke_ids: Sequence[str], now: int, lease_ms: int
    ) -> None:
        """A committed step of `run` stopped its calls `invoke_ids`: a slot of a limited call
        site reserved for one of them (woken, not yet claimed) goes to the next in its queue
        now, not once the reservation runs out (a lease later). One release of each such
        limit, with no holders: the store deletes a reservation whose call has ended."""
        if not self.limits:
            return
        stopped = set(invoke_ids)
        names = {
            invoke.limit
            for node in machine.definition.nodes
            for invoke in node.invoke
            if invoke.id in stopped and invoke.limit is not None
        }
        for name in sorted(names):
            limit = self.limits.get(name)
            if limit is None or limit.max_in_flight is None:
                continue
            try:
                share = self.share(name, _context(run))
            except LimitKeyError:  # (its calls never took a place)
                continue
            self.store.release_capacity(
                share, [], now, max_in_flight=limit.max_in_flight, lease_ms=lease_ms
            )

    def share(self, name: str, context: Mapping[str, Any]) -> str:
        """The stored name of the limit a run with `context` takes a place of: `name`, or its
        key's share of it (`LimitKeyError` when the context has no key for it)."""
        limit = self.limits.get(name)
        if limit is None or limit.key is None:
            return name
        return keyed_name(name, limit_key(name, limit, context))

    def limit(self, stored: str) -> Limit | _PausesOnly:
        """The limit behind a stored name (a per-key limit's share: the limit itself)."""
        found = self.limits.get(stored)
        if found is None:
            base, key = split_name(stored)
            found = self.limits.get(base) if key is not None else None
        return found if found is not None else _PAUSES_ONLY

    def start_share(self, workflow_name: str, context: Mapping[str, Any]) -> str | None:
        """The limit a new run of `workflow_name` with `context` will take places of (None:
        its workflow is not limited). A run whose context has no key for it is refused at its
        start (`LimitKeyError`): it could never be stepped."""
        name = self.workflow_limits.get(workflow_name)
        return None if name is None else self.share(name, context)

    def workflow_place(self, run: RunRecord) -> Place | None:
        """The place a run of a limited workflow needs to be stepped; per key, the share of the
        key in the run's context as claimed (`LimitKeyError` when it has none)."""
        name = self.workflow_limits.get(run.workflow_name)
        if name is None:
            return None
        return self.share(name, _context(run)), f"run:{run.id}"

    def enter(
        self,
        run_id: str,
        owner: str,
        places: Sequence[Place],
        now: int,
        lease_ms: int,
        call: str | None = None,
    ) -> Grant:
        """Take every place or none, one limit per transaction: a refused one gives back the
        call places taken (a run's place stays: its liveness follows the run and its open
        calls), and the run, or with `call` that call of the run (released by the store),
        waits for what the refusal says."""
        taken: list[Place] = []
        for name, holder in places:
            limit = self.limit(name)
            grant = self.store.acquire_capacity(
                name,
                holder,
                run_id,
                owner,
                now,
                max_in_flight=limit.max_in_flight,
                calls=limit.calls,
                per_ms=limit.per_ms,
                recheck_ms=limit.recheck_ms,
                lease_ms=lease_ms,
                call=call,
            )
            if not grant.granted:
                self.leave([p for p in taken if not p[1].startswith("run:")], now, lease_ms)
                return grant
            taken.append((name, holder))
        return Grant(True)

    def leave(self, places: Sequence[Place], now: int, lease_ms: int) -> None:
        """Give the slots back; each freed slot is reserved for the next in its queue, which
        is woken (a run claimed, a call made due) before anything else."""
        for name, holder in places:
            limit = self.limit(name)
            if limit.max_in_flight is not None:
                self.store.release_capacity(
                    name, [holder], now, max_in_flight=limit.max_in_flight, lease_ms=lease_ms
                )

    def sweep(self, now: int, lease_ms: int) -> None:
        """Hand slots freed by expired leases (and reservations nobody came for) to the queues'
        heads: what a release would have done had the holder lived to make it."""
        for name, limit in sorted(self.limits.items()):
            if limit.max_in_flight is None:
                continue
            for share in self._shares(name, limit):
                self.store.release_capacity(
                    share, [], now, max_in_flight=limit.max_in_flight, lease_ms=lease_ms
                )

    def _shares(self, name: str, limit: Limit) -> Iterator[str]:
        """The stored limits of `name`: itself, or per key the shares in use, a page at a time
        (each page after the last name read: the walk ends)."""
        if limit.key is None:
            yield name
            return
        after: str | None = None
        while page := self.store.limit_shares(name, after):
            yield from page
            after = page[-1]

    def pause_after(self, places: Sequence[Place], done: Sequence[Executed], now: int) -> None:
        """A limited call that failed with a `retry_after` pauses its limit for everyone."""
        by_key = {holder: name for name, holder in places}
        for executed in done:
            name = by_key.get(executed.outcome.idempotency_key)
            wait = retry_after(executed)
            if name is not None and wait is not None:
                self.store.pause_capacity(name, now + wait, now)


def _context(run: RunRecord) -> Mapping[str, Any]:
    """The context of `run` as its row holds it (empty when it holds none)."""
    context = run.snapshot.get("context") if isinstance(run.snapshot, Mapping) else None
    return context if isinstance(context, Mapping) else {}


def retry_after(executed: Executed) -> int | None:
    """The `retry_after` (ms) a failed call's error carried, if any."""
    error = (executed.event or {}).get("error") if executed.outcome.status == "failed" else None
    wait = error.get("retry_after") if isinstance(error, Mapping) else None
    if isinstance(wait, int | float) and not isinstance(wait, bool) and wait > 0:
        return int(wait)
    return None
