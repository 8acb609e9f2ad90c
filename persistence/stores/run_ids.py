"""Run ids: random version-4 UUIDs, their randomness read from the operating system in bulk.

`uuid.uuid4()` reads its 16 bytes with a system call that lets go of the GIL, and the thread
then waits to get it back: with other threads busy (a worker's, its call executor's, the
pool's) that wait can last the interpreter's switch interval, once per id. With two busy
threads, 2,000 `uuid4()` took 2.4 s where 2,000 ids from one read took 22 ms; a
`Runtime.start_many` of 10,000 runs beside a working `Worker` spent most of its first second
there. The ids are as random as `uuid4()`'s (`os.urandom`); a forked child forgets the bytes
its parent read, so the two never hand out the same id.
"""

from __future__ import annotations

import os
import threading
import uuid

IDS_PER_READ = 256
"""How many ids' worth of random bytes one read from the operating system takes."""


class _RandomBytes:
    """16 random bytes at a time, from reads of `IDS_PER_READ` ids' worth."""

    def __init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        """Drop what was read (and a lock another thread may have held at a fork)."""
        self._lock = threading.Lock()
        self._buffer, self._at = b"", 0

    def take16(self) -> bytes:
        with self._lock:
            if self._at >= len(self._buffer):
                self._buffer, self._at = os.urandom(16 * IDS_PER_READ), 0
            at = self._at
            self._at = at + 16
            return self._buffer[at : at + 16]


_RANDOM = _RandomBytes()
os.register_at_fork(after_in_child=_RANDOM.forget)


def random_uuid() -> uuid.UUID:
    """A random version-4 UUID, as `uuid.uuid4()` makes one."""
    return uuid.UUID(bytes=_RANDOM.take16(), version=4)


def new_run_id() -> str:
    """A new run's id: a random UUID in its text form."""
    return str(random_uuid())
