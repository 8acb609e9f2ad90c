"""In-memory store for tests and demos: SQLite in memory, so it runs the real SQL.

Nothing is durable: the database lives as long as the store object (`sqlite://:memory:`
semantics, one connection). It behaves exactly like `SQLiteStore` because it is one.
"""

from __future__ import annotations

from persistence.stores.sqlite import SQLiteStore
from persistence.wakeup import Wakeup


class MemoryStore(SQLiteStore):
    """A store living in this process only (tests and demos)."""

    def __init__(self) -> None:
        super().__init__(":memory:", synchronous="off")
        self.url = "memory://"
        self._own_wakeup = Wakeup()
