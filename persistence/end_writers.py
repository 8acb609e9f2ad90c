"""`EndWriters`: a call executor's bursts of call ends, written beside its serving loop.

A burst of ends (each with the step that applies its result, `RunDriver.finish_calls`) is one
statement whose planning is Python and whose execution is the server's: written in the serving
loop, one burst's statement ran while nothing planned the next, and neither started the calls
handed over meanwhile. Here each burst is written by one of `WRITERS` threads, each with a
`RunDriver` of its own, so one burst is planned while another's statement runs, and the serving
loop goes back to starting calls.

Order is kept where it means something: the ends of one run are written in the order they
ended. A burst waits for the bursts before it that hold an end of one of its runs, and an end
written on its own (`wait_for`) waits for them too; bursts of other runs overlap.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Collection
from concurrent.futures import Future, ThreadPoolExecutor, wait
from functools import partial

from persistence.driver import RunDriver
from persistence.stores import StoreError

log = logging.getLogger("statecharts.calls")

WRITERS = 2
"""Bursts of ends written at once by one executor (a connection each while they run)."""

Write = Callable[[RunDriver], None]
Done = Callable[[bool], None]


class EndWriters:
    """`WRITERS` threads writing bursts of call ends in order per run (`submit`)."""

    def __init__(self, new_driver: Callable[[], RunDriver], name: str) -> None:
        self._new_driver = new_driver
        self._name = name
        self._drivers: queue.SimpleQueue[RunDriver] = queue.SimpleQueue()
        self._free = threading.Semaphore(WRITERS)
        self._lock = threading.Lock()
        self._writing: dict[str, Future[None]] = {}  # run id -> the last burst holding it
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, run_ids: Collection[str], write: Write, done: Done) -> None:
        """Have `write` (a burst holding ends of `run_ids`) run by a writer once the bursts
        before it that hold one of those runs are written, then `done(written)` (False: the
        store failed, logged; the calls' leases lapse and another claim runs them again). It
        waits while `WRITERS` bursts are in flight: the ends behind them stay queued."""
        self._free.acquire()
        try:
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(WRITERS, self._name)
                before = {self._writing[r] for r in run_ids if r in self._writing}
                # (a pool runs in submission order, so `before` has started when this starts)
                future = self._pool.submit(self._write, before, write, done)
                for run_id in run_ids:
                    self._writing[run_id] = future
        except BaseException:
            self._free.release()
            raise
        future.add_done_callback(partial(self._written, run_ids))

    def wait_for(self, run_id: str) -> None:
        """Until no burst holding an end of `run_id` is being written (before an end of it is
        written on its own)."""
        with self._lock:
            future = self._writing.get(run_id)
        if future is not None:
            wait([future])

    def close(self) -> None:
        """Wait for the bursts in flight; the writers stop."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def _write(self, before: set[Future[None]], write: Write, done: Done) -> None:
        wait(before)
        try:
            driver = self._drivers.get_nowait()
        except queue.Empty:
            driver = self._new_driver()
        written = False
        try:
            write(driver)
            written = True
        except StoreError as exc:
            log.warning("%s: call ends not written (%s); left to their leases", self._name, exc)
        except Exception:  # a bug: logged, never a silent death of the writer
            log.exception("%s: a burst of call ends raised", self._name)
        finally:
            self._drivers.put(driver)
            try:
                done(written)
            except Exception:
                log.exception("%s: after a burst of call ends", self._name)

    def _written(self, run_ids: Collection[str], future: Future[None]) -> None:
        with self._lock:
            for run_id in run_ids:
                if self._writing.get(run_id) is future:
                    del self._writing[run_id]
        self._free.release()
