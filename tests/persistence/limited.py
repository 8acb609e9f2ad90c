"""Workflows and limits for the load-control tests (`tests/persistence/test_capacity.py`,
`tests/persistence/test_capacity_faults.py`),
importable by worker subprocesses (`--machines tests.persistence.limited --limits
tests.persistence.limited`).

The fake downstream records every call in the ledger (tests.persistence.workflows) with the
time it started and ended, as the downstream itself saw them, so a test measures from outside
how many calls were in flight at once and how many started in any window.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from persistence.capacity import Limit
from statecharts import create_machine
from tests.persistence.faulty import set_switch, switch
from tests.persistence.workflows import _call, _ledger

LIMITS = {
    "crm": Limit(max_in_flight=3, recheck_ms=5_000),
    "api": Limit(calls=4, per_ms=2000),
    "pay": Limit(max_in_flight=50, recheck_ms=5_000),
    "one": Limit(max_in_flight=1, recheck_ms=5_000),
    "two": Limit(max_in_flight=2, recheck_ms=5_000),
    "tenant": Limit(max_in_flight=4, key="tenant", recheck_ms=120_000),
    "tenant_call": Limit(max_in_flight=4, key="tenant", recheck_ms=5_000),
}
WORKFLOW_LIMITS = {"tenanted": "tenant"}
"""At most 4 runs of `tenanted` stepped at once per tenant (the run's `tenant`)."""
RETRY_AFTER_MS = 2_000


class Throttled(Exception):
    """A 429 from the downstream, with the Retry-After it sent (ms)."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"429 Too Many Requests, retry after {retry_after} ms")
        self.retry_after = retry_after


def downstream(request: Any, idempotency_key: str) -> str:
    """The fake downstream `request["name"]`: takes `request["ms"]`; answers 429 once while
    the `throttle` switch is on (then switches it off)."""
    request = dict(request or {})
    name = str(request.get("name", "downstream"))
    if request.get("throttle") and switch("throttle"):
        set_switch("throttle", False)
        _call(name, idempotency_key)
        raise Throttled(RETRY_AFTER_MS)
    _call(name, idempotency_key, lambda db: time.sleep(int(request.get("ms", 0)) / 1000))
    return "ok"


def _calling(machine_id: str, limit: str | None, retry: dict[str, Any] | None = None) -> Any:
    invoke: dict[str, Any] = {
        "id": "call",
        "src": "downstream",
        "input": lambda c, e: c,
        "onDone": "done",
        "onError": "failed",
    }
    if limit is not None:
        invoke["limit"] = limit
    if retry is not None:
        invoke["retry"] = retry
    return create_machine(
        {
            "id": machine_id,
            "initial": "calling",
            "context": lambda input: dict(input or {}),
            "states": {
                "calling": {"invoke": invoke},
                "done": {"type": "final"},
                "failed": {"type": "final"},
            },
        },
        actors={"downstream": downstream},
    )


crm = _calling("crm_sync", "crm")
rated = _calling("rated", "api")
paid = _calling("paid", "pay", retry={"max_attempts": 3, "initial_interval": 100})
single = _calling("single", "one")
pair = _calling("pair", "two")
tenanted = _calling("tenanted", None)
"""A workflow limited per tenant (`WORKFLOW_LIMITS`, the run's `tenant`): each tenant's calls
recorded as `t-<tenant>` (pass `{"name": "t-a", "tenant": "a"}`)."""
tenant_calls = _calling("tenant_calls", "tenant_call")
"""Calls limited per tenant at their call site (the run's `tenant`), recorded as above."""
MACHINES = [crm, rated, paid, single, pair, tenanted, tenant_calls]


def intervals(
    name: str, killed_at: float | Mapping[int, float] | None = None
) -> list[tuple[str, float, float]]:
    """(run id, started, ended) of every call of downstream `name`, in start order; a call that
    never ended (its worker was killed) ends at `killed_at`: one time, or the time each worker
    process (by pid) was killed."""
    db = _ledger()
    try:
        rows = db.execute(
            "SELECT run, pid, started, ended FROM calls WHERE name = ? ORDER BY started", (name,)
        ).fetchall()
    finally:
        db.close()
    return [(k, s, e if e is not None else _killed(killed_at, pid, s)) for k, pid, s, e in rows]


def _killed(killed_at: float | Mapping[int, float] | None, pid: int, started: float) -> float:
    """When the call started at `started` by process `pid` ended, if it never returned."""
    if isinstance(killed_at, Mapping):
        return killed_at.get(pid, started)
    return killed_at or started


def max_in_flight(name: str, killed_at: float | Mapping[int, float] | None = None) -> int:
    """The most calls of `name` the downstream had in flight at one instant."""
    edges = sorted(
        [(s, 1) for _, s, _ in intervals(name, killed_at)]
        + [(e, -1) for _, _, e in intervals(name, killed_at)],
        key=lambda edge: (edge[0], edge[1]),
    )  # an end before a start at one instant
    most = current = 0
    for _, step in edges:
        current += step
        most = max(most, current)
    return most


def most_started_within(name: str, window_s: float) -> int:
    """The most calls of `name` started within any `window_s` seconds."""
    starts = [s for _, s, _ in intervals(name)]
    return max((sum(1 for t in starts if s <= t < s + window_s) for s in starts), default=0)
