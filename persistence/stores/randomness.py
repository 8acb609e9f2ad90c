"""Random bytes read from the operating system in bulk: run ids' and payload nonces'.

`os.urandom` lets go of the GIL for its system call, and the thread then waits to get it back:
with other threads busy (a worker's, its call executor's, the pool's) that wait can last the
interpreter's switch interval, once per call. With two busy threads, 2,000 `uuid.uuid4()`
(one `os.urandom(16)` each) took 2.4 s where 2,000 ids from one read took 22 ms, and 500
`os.urandom(12)` 327 ms against 11 ms; a `Runtime.start_many` of 10,000 runs beside a working
`Worker` spent most of its first second there. The bytes handed out are `os.urandom`'s, each
handed out once; a forked child forgets the bytes its parent read, so the two never hand out
the same ones.
"""

from __future__ import annotations

import os
import threading

BYTES_PER_READ = 4096
"""How many random bytes one read from the operating system takes (256 run ids' worth)."""


class _RandomBytes:
    """Random bytes handed out from reads of `BYTES_PER_READ` bytes."""

    def __init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        """Drop what was read (and a lock another thread may have held at a fork)."""
        self._lock = threading.Lock()
        self._buffer, self._at = b"", 0

    def take(self, n: int) -> bytes:
        with self._lock:
            if self._at + n > len(self._buffer):
                self._buffer, self._at = os.urandom(max(n, BYTES_PER_READ)), 0
            at = self._at
            self._at = at + n
            return self._buffer[at : at + n]


_RANDOM = _RandomBytes()
os.register_at_fork(after_in_child=_RANDOM.forget)


def random_bytes(n: int) -> bytes:
    """`n` bytes from the operating system's random source, as `os.urandom(n)` gives them."""
    return _RANDOM.take(n)
