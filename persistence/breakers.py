"""Circuit breakers per downstream name, their state shared by every worker through the store.

An invoke names its downstream with `breaker: "payments"`. After `failure_threshold` failures in
a row the breaker opens: calls fail fast with `CircuitOpenError` (carrying `retry_after`, the time
until the breaker half-opens, so a retry policy waits exactly that long) into the invoke's normal
error path. After `reset_timeout_ms` one caller is let through as a probe (half-open); its
success closes the breaker, its failure opens it again. A probe that never reports (its worker
died) is replaced after another `reset_timeout_ms`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from persistence.stores import BreakerRecord, Store
from persistence.stores.records import CLOSED, HALF_OPEN, OPEN

_CAS_ATTEMPTS = 20


@dataclass(frozen=True)
class BreakerPolicy:
    """When a breaker opens and how long it stays open."""

    failure_threshold: int = 5
    reset_timeout_ms: int = 30_000

    def __post_init__(self) -> None:
        if self.failure_threshold < 1:
            raise ValueError(f"failure_threshold must be >= 1, not {self.failure_threshold}")
        if self.reset_timeout_ms < 0:
            raise ValueError(f"reset_timeout_ms must be >= 0, not {self.reset_timeout_ms}")


class CircuitOpenError(Exception):
    """The breaker for a downstream is open: the call was not made."""

    def __init__(self, name: str, retry_after: int) -> None:
        super().__init__(f"circuit breaker {name!r} is open; next probe in {retry_after} ms")
        self.retry_after = retry_after


class SharedBreaker:
    """The breaker `name`, read and updated with compare-and-set on its store record."""

    def __init__(self, store: Store, name: str, policy: BreakerPolicy) -> None:
        self.store, self.name, self.policy = store, name, policy

    def _load(self) -> tuple[BreakerRecord, int]:
        record = self.store.get_breaker(self.name)
        if record is None:
            return BreakerRecord(self.name, CLOSED), 0
        return record, record.version

    def before_call(self, now: int) -> None:
        """Allow the call, or raise `CircuitOpenError`. Claims the probe when half-opening."""
        reset = self.policy.reset_timeout_ms
        for _ in range(_CAS_ATTEMPTS):
            record, version = self._load()
            if record.state == CLOSED:
                return
            since = record.opened_at if record.state == OPEN else record.data.get("probe_at")
            since = since if isinstance(since, int) else now
            if now < since + reset:
                raise CircuitOpenError(self.name, since + reset - now)
            probe = replace(record, state=HALF_OPEN, data={**record.data, "probe_at": now})
            if self.store.put_breaker(probe, version, now):
                return  # this caller is the probe
        raise CircuitOpenError(self.name, reset)

    def record(self, success: bool, now: int) -> None:
        """Report how the call went: success closes the breaker; failures count towards
        opening it (a failed probe reopens it at once)."""
        for _ in range(_CAS_ATTEMPTS):
            record, version = self._load()
            if success:
                if record.state == CLOSED and record.failure_count == 0:
                    return
                new = BreakerRecord(self.name, CLOSED)
            else:
                failures = record.failure_count + 1
                opens = record.state == HALF_OPEN or (
                    record.state == CLOSED and failures >= self.policy.failure_threshold
                )
                new = replace(
                    record,
                    failure_count=failures,
                    state=OPEN if opens else record.state,
                    opened_at=now if opens else record.opened_at,
                    data={} if opens else record.data,
                )
            if self.store.put_breaker(new, version, now):
                return
