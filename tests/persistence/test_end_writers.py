"""`EndWriters`: bursts of call ends written beside the serving loop, in order per run.

The writes here are plain functions that record when they ran; what is checked is the order
the writers promise: a burst holding an end of a run is written only after the bursts before
it that hold that run, while a burst of other runs is written at the same time.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from persistence.end_writers import WRITERS, EndWriters
from persistence.stores import StoreUnavailableError

WAIT_S = 5.0


class Log:
    """What the writes did, in order, and the drivers they were handed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[str] = []
        self.drivers: set[int] = set()
        self.done: list[tuple[str, bool]] = []

    def add(self, event: str) -> None:
        with self.lock:
            self.events.append(event)

    def write(self, name: str, gate: threading.Event | None = None) -> Any:
        def write(driver: Any) -> None:
            self.drivers.add(id(driver))
            self.add(f"{name} start")
            if gate is not None:
                assert gate.wait(WAIT_S)
            self.add(f"{name} end")

        return write

    def ended(self, name: str) -> Any:
        def done(written: bool) -> None:
            with self.lock:
                self.done.append((name, written))

        return done


def writers() -> EndWriters:
    return EndWriters(object, "test-ends")  # type: ignore[arg-type]


def until(predicate: Any) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_burst_of_a_run_waits_for_the_burst_before_it_and_others_overlap() -> None:
    assert WRITERS >= 2
    log, ends = Log(), writers()
    first = threading.Event()
    ends.submit({"r1", "r2"}, log.write("a", first), log.ended("a"))
    until(lambda: "a start" in log.events)
    ends.submit({"r3"}, log.write("c"), log.ended("c"))
    until(lambda: "c end" in log.events)  # another run's burst is not held back by a
    ends.submit({"r1"}, log.write("b"), log.ended("b"))  # r1's next: only after a
    time.sleep(0.05)
    assert "b start" not in log.events
    first.set()
    ends.close()
    assert log.events.index("a end") < log.events.index("b start")
    assert sorted(log.done) == [("a", True), ("b", True), ("c", True)]


def test_an_end_written_alone_waits_for_its_runs_burst_in_flight() -> None:
    log, ends = Log(), writers()
    gate = threading.Event()
    ends.submit({"r1"}, log.write("a", gate), log.ended("a"))
    until(lambda: "a start" in log.events)
    waited = threading.Thread(target=lambda: (ends.wait_for("r1"), log.add("alone")))
    waited.start()
    ends.wait_for("r2")  # (no burst holds r2: no wait)
    time.sleep(0.05)
    assert "alone" not in log.events
    gate.set()
    waited.join(WAIT_S)
    assert log.events == ["a start", "a end", "alone"]
    ends.close()


def test_no_more_bursts_are_in_flight_than_writers_and_each_has_a_driver_of_its_own() -> None:
    log, ends = Log(), writers()
    gate = threading.Event()
    for i in range(WRITERS):
        ends.submit({f"r{i}"}, log.write(f"w{i}", gate), log.ended(f"w{i}"))
    until(lambda: sum(e.endswith("start") for e in log.events) == WRITERS)
    submitted = threading.Event()
    extra = threading.Thread(
        target=lambda: (ends.submit({"rx"}, log.write("x"), log.ended("x")), submitted.set())
    )
    extra.start()
    time.sleep(0.05)
    assert not submitted.is_set()  # (the serving loop waits; its ends stay queued)
    gate.set()
    extra.join(WAIT_S)
    ends.close()
    assert len(log.drivers) == WRITERS
    assert sorted(name for name, written in log.done if written) == sorted(
        [*(f"w{i}" for i in range(WRITERS)), "x"]
    )


def test_a_store_failure_is_reported_as_not_written_and_the_writers_go_on() -> None:
    log, ends = Log(), writers()

    def failing(driver: Any) -> None:
        raise StoreUnavailableError("server gone")

    ends.submit({"r1"}, failing, log.ended("failed"))
    ends.submit({"r1"}, log.write("next"), log.ended("next"))
    ends.close()
    assert log.done == [("failed", False), ("next", True)]
