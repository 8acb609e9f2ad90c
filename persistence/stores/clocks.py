"""The store's clock: the one time base a database's leases and timers are written and compared
in, read without a round trip, never stepping back under a run.

A store's times (leases, timers' due times, `created_at`, ...) are whatever `now` its callers
pass; a `Runtime` given no clock passes this one (`Store.clock()`), so every worker, on every
machine, measures in the same time base whatever its own wall clock says. It is an anchor, one
reading of the store's time base paired with this process's monotonic clock at that instant,
carried forward by the monotonic clock, which no setting of the wall clock moves:

- PostgreSQL (`server_clock`): the anchor is the database server's clock
  (`clock_timestamp()`), read once, when the clock is first asked, halfway through that round
  trip. A worker's wall clock stepped back (or forward) an hour changes nothing: its leases
  and timers are the server's time.
- SQLite (`machine_clock`; one machine): the anchor is kept in the database
  (`workflow_clock`, one row per boot of the machine: the monotonic clock is the kernel's, the
  same in every process until a reboot), so every process reads the same time. The machine's
  wall clock is followed when it runs ahead by more than `FOLLOW_MS` (a step forward, NTP's
  correction after boot; the anchor moves forward in the database too), never when it steps
  back: a run's lease written before a step back an hour still ends a lease later, not an hour
  later. After a reboot the clock starts again from the wall clock. Where the boot cannot be
  told (no `/proc/sys/kernel/random/boot_id`: not Linux), each process anchors to the wall
  clock when it first asks, and a step back between two processes' first readings is not
  caught.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("statecharts.store")

FOLLOW_MS = 1_000
"""How far the machine's wall clock may run ahead of a SQLite store's clock before the store's
clock follows it (a step forward); a step back is never followed."""

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")

Anchor = tuple[int, int]
"""(epoch ms of the store's time base, this process's `time.monotonic_ns()`) at one instant."""


def monotonic_ms() -> int:
    """This process's monotonic clock in ms (the kernel's: one for every process until reboot)."""
    return time.monotonic_ns() // 1_000_000


def wall_ms() -> int:
    """The machine's wall clock in epoch ms."""
    return time.time_ns() // 1_000_000


def boot_id() -> str | None:
    """This boot of the machine (Linux), or None where it cannot be told."""
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None


class StoreClock:
    """`now()` in the store's time base: `offset + monotonic_ms()`, the offset read by `anchor`
    when first asked (`Store.clock()` makes one; see the module docstring)."""

    def __init__(
        self, anchor: Callable[[], int], follow: Callable[[int], None] | None = None
    ) -> None:
        """`anchor()`: the store time minus `monotonic_ms()` at one instant. `follow(offset)`:
        given, the wall clock is followed when ahead by over `FOLLOW_MS` and each new offset is
        handed to it (to keep)."""
        self._anchor = anchor
        self._follow = follow
        self._offset: int | None = None

    def now(self) -> int:
        """The store's time, epoch milliseconds; never less than an earlier answer."""
        offset = self._offset
        if offset is None:
            offset = self._offset = self._anchor()
        now = offset + monotonic_ms()
        if self._follow is not None:
            wall = wall_ms()
            if wall - now > FOLLOW_MS:  # the wall clock stepped forward: follow it
                self._offset = wall - monotonic_ms()
                self._follow(self._offset)
                return wall
        return now


def server_clock(read: Callable[[], int]) -> StoreClock:
    """A clock anchored to a database server's clock; `read()` asks the server for its time in
    epoch ms, the anchor taken halfway through that round trip."""

    def anchor() -> int:
        before = time.monotonic_ns()
        server = read()
        return server - (before + time.monotonic_ns()) // 2_000_000

    return StoreClock(anchor)


def machine_clock(load: Callable[[str, int], int], keep: Callable[[str, int], None]) -> StoreClock:
    """A clock of one machine, its anchor shared through the database: `load(boot, offset)`
    returns the offset kept for `boot` (keeping `offset` first if there is none, or if the one
    kept is of another boot); `keep(boot, offset)` moves the kept offset forward to `offset`."""
    boot = boot_id()

    def anchor() -> int:
        offset = wall_ms() - monotonic_ms()
        return offset if boot is None else load(boot, offset)

    def follow(offset: int) -> None:
        if boot is not None:
            keep(boot, offset)

    return StoreClock(anchor, follow)
