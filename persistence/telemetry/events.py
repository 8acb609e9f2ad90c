"""The events an operator acts on: a run failed, a retry was scheduled, a lease was taken over,
an event was dead-lettered, a value was refused, a step lost its lease.

Each is reported once, where it happens, as a `RunEvent`; `Telemetry.report` writes its one log
line (logger `statecharts.runs`, the event's fields as the record's `statecharts` attribute for
structured formatters), counts it in the metrics and adds it to the run's open step span.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from statecharts.tracing import trace_id_of

log = logging.getLogger("statecharts.runs")

RUN_FAILED = "run_failed"
RETRY_SCHEDULED = "retry_scheduled"
TAKEOVER = "takeover"
DEAD_LETTER = "dead_letter"
POISONED_VALUE = "poisoned_value"
LEASE_LOST = "lease_lost"

KINDS = (RUN_FAILED, RETRY_SCHEDULED, TAKEOVER, DEAD_LETTER, POISONED_VALUE, LEASE_LOST)

RECORD_ATTRIBUTE = "statecharts"
"""The `logging.LogRecord` attribute holding a reported event's fields (a dict)."""


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One operator event about one run. `message` is the whole log line; `fields` adds
    what the kind needs (the reason, attempt, event type, previous owner, ...)."""

    kind: str
    run_id: str
    workflow: str
    key: str | None
    state: str
    message: str
    level: int = logging.WARNING
    traceparent: str | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown run event kind {self.kind!r}; expected one of {KINDS}")

    @property
    def trace_id(self) -> str | None:
        """The run's trace id (from the traceparent stored with it), if it has one."""
        return trace_id_of(self.traceparent)

    def record_fields(self) -> dict[str, Any]:
        """What a structured log line carries: event, run id, workflow, key, state, trace id and
        the kind's own fields."""
        return {
            "event": self.kind,
            "run_id": self.run_id,
            "workflow": self.workflow,
            "key": self.key,
            "state": self.state,
            "trace_id": self.trace_id,
            **self.fields,
        }


def write(event: RunEvent) -> None:
    """The event's one log line."""
    if log.isEnabledFor(event.level):
        log.log(event.level, "%s", event.message, extra={RECORD_ATTRIBUTE: event.record_fields()})
