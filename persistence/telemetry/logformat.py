"""Log formats for workers: one line per record, as text or as JSON (`--log-format json`).

Both show what an operator needs to find the run: an operator event's fields (run id, workflow,
key, state, trace id, reason) come from the record's `statecharts` attribute (see
`persistence.telemetry.events`). Records without it get the trace id of the span current when
they were written, if any.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson

from persistence.telemetry.events import RECORD_ATTRIBUTE
from statecharts.tracing import current_traceparent, trace_id_of

FORMATS = ("text", "json")

_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    found = getattr(record, RECORD_ATTRIBUTE, None)
    if isinstance(found, dict):
        return found
    trace_id = trace_id_of(current_traceparent())
    return {"trace_id": trace_id} if trace_id else {}


class TextFormatter(logging.Formatter):
    """`time LEVEL logger: message`, then `trace_id=...` when the record has one."""

    def __init__(self) -> None:
        super().__init__(_TEXT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        trace_id = _fields(record).get("trace_id")
        return f"{line} trace_id={trace_id}" if trace_id else line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: `time` (ISO 8601, UTC), `level`, `logger`, `message`, the
    event's fields when it is an operator event, and `exception` with the traceback if any."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        data: dict[str, Any] = {
            "time": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in _fields(record).items():
            data.setdefault(name, value)
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(data, default=str).decode()


def formatter(name: str) -> logging.Formatter:
    """The formatter for `--log-format` `name` ("text" or "json")."""
    if name == "json":
        return JsonFormatter()
    if name == "text":
        return TextFormatter()
    raise ValueError(f"log format {name!r}: expected one of {', '.join(FORMATS)}")


def configure(level: str, fmt: str) -> None:
    """Log to stderr at `level` in format `fmt` (replacing the root logger's handlers)."""
    handler = logging.StreamHandler()
    handler.setFormatter(formatter(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
