"""Worker log lines: an operator event carries run id, workflow, key, state and trace id, as
text and as one JSON object per line."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import orjson
import pytest

from persistence.telemetry import RunEvent, Telemetry
from persistence.telemetry.events import DEAD_LETTER, RUN_FAILED
from persistence.telemetry.logformat import JsonFormatter, TextFormatter, formatter

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture(autouse=True)
def _loggers_enabled() -> Iterator[None]:
    """Other tests configure logging (levels, disabled loggers): start from a known state."""
    names = ("statecharts", "statecharts.runs", "statecharts.worker")
    saved = [
        (logging.getLogger(n).level, logging.getLogger(n).disabled, logging.getLogger(n).propagate)
        for n in names
    ]
    for n in names:
        logger = logging.getLogger(n)
        logger.setLevel(logging.INFO if n == "statecharts" else logging.NOTSET)
        logger.disabled, logger.propagate = False, True
    yield
    for n, (level, disabled, propagate) in zip(names, saved, strict=True):
        logger = logging.getLogger(n)
        logger.setLevel(level)
        logger.disabled, logger.propagate = disabled, propagate


def _capture(fmt: logging.Formatter) -> tuple[io.StringIO, logging.Handler]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(fmt)
    logging.getLogger("statecharts").addHandler(handler)
    return stream, handler


def _failed() -> RunEvent:
    return RunEvent(
        RUN_FAILED,
        "r-1",
        "invoice",
        "INV-7",
        "charging",
        "run r-1 failed (workflow invoice, key INV-7, state charging): boom",
        traceparent=TRACEPARENT,
        fields={"reason": "boom"},
    )


@pytest.mark.parametrize("kind", ["json", "text"])
def test_an_operator_event_is_one_line_with_its_fields(kind: str) -> None:
    stream, handler = _capture(formatter(kind))
    try:
        Telemetry.off().report(_failed())
    finally:
        logging.getLogger("statecharts").removeHandler(handler)
    (line,) = stream.getvalue().splitlines()
    if kind == "json":
        data = orjson.loads(line)
        assert data["level"] == "WARNING" and data["logger"] == "statecharts.runs"
        assert data["message"].startswith("run r-1 failed")
        assert {
            k: data[k]
            for k in ("event", "run_id", "workflow", "key", "state", "trace_id", "reason")
        } == {
            "event": "run_failed",
            "run_id": "r-1",
            "workflow": "invoice",
            "key": "INV-7",
            "state": "charging",
            "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
            "reason": "boom",
        }
        assert data["time"].endswith("Z")
    else:
        assert "WARNING statecharts.runs: run r-1 failed (workflow invoice, key INV-7" in line
        assert line.endswith("trace_id=4bf92f3577b34da6a3ce929d0e0e4736")


def test_plain_records_and_exceptions_in_json() -> None:
    stream, handler = _capture(JsonFormatter())
    log = logging.getLogger("statecharts.worker")
    try:
        log.warning("store unavailable (%s); retrying", "down")
        try:
            raise RuntimeError("bad")
        except RuntimeError:
            log.exception("thread died")
    finally:
        logging.getLogger("statecharts").removeHandler(handler)
    first, second = (orjson.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "store unavailable (down); retrying" and "trace_id" not in first
    assert second["level"] == "ERROR" and "RuntimeError: bad" in second["exception"]


def test_text_without_a_trace_id_is_the_plain_line() -> None:
    stream, handler = _capture(TextFormatter())
    try:
        Telemetry.off().report(RunEvent(DEAD_LETTER, "r-2", "w", None, "s", "run r-2: dropped"))
    finally:
        logging.getLogger("statecharts").removeHandler(handler)
    assert stream.getvalue().rstrip().endswith("statecharts.runs: run r-2: dropped")


def test_unknown_format_and_kind_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'xml'"):
        formatter("xml")
    with pytest.raises(ValueError, match="'exploded'"):
        RunEvent("exploded", "r", "w", None, "s", "m")
