"""The fake outside world the example workflows talk to in demos and tests.

Fakes for the CRM, task tool, mail server, summarizer, invoice API and customer database keep
their state in one SQLite database (a file, or memory for a single process), so a worker
subprocess and the process that inspects the results see the same tasks, mails and invoices.
Failures are injected per target on demand: ``world.fail("crm", times=2)`` makes the next two
CRM calls raise, ``times=-1`` keeps it down until ``world.heal("crm")``. ``world.hold("tasks",
after=2)`` makes the caller that completes the second task write block right after it, until
``world.release("tasks")``: the moment to SIGKILL a worker mid-run.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

FOREVER = -1

_SCHEMA = """
create table if not exists faults (
  target text primary key, remaining integer not null, message text not null);
create table if not exists calls (target text primary key, count integer not null);
create table if not exists holds (
  target text primary key, after integer not null, reached integer not null default 0);
create table if not exists deals (
  id text primary key, name text not null, stage text not null, owner text not null);
create table if not exists stages (name text primary key, position integer not null);
create table if not exists emails (
  id integer primary key, deal_id text not null, sent_at integer not null,
  sender text not null, subject text not null, body text not null);
create table if not exists tasks (
  id text primary key, external_key text not null, title text not null, body text not null,
  due_on text not null);
create table if not exists mails (
  id text primary key, recipient text not null, subject text not null, body text not null);
create table if not exists customers (
  id text primary key, name text not null, email text not null);
create table if not exists invoices (
  id text primary key, idempotency_key text not null unique, order_id text not null,
  customer_id text not null, amount_cents integer not null, currency text not null);
create table if not exists invoice_records (order_id text primary key, invoice_id text not null);
"""


class FakeWorld:
    """State of every fake downstream system, in SQLite at ``path`` (``:memory:`` default).

    Connecting is lazy, so a module may build one at import time without touching the disk.
    """

    def __init__(self, path: str = ":memory:") -> None:
        self.path = path
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(
                self.path, timeout=30, isolation_level=None, check_same_thread=False
            )
            conn.row_factory = sqlite3.Row
            if self.path != ":memory:":
                conn.execute("pragma journal_mode=wal")
                conn.execute("pragma synchronous=normal")  # a fake: speed over durability
            conn.executescript(_SCHEMA)
            self._conn = conn
        return self._conn

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One immediate transaction (other processes wait for it)."""
        with self._lock:
            conn = self._connection()
            conn.execute("begin immediate")
            try:
                yield conn
            except BaseException:
                conn.execute("rollback")
                raise
            conn.execute("commit")

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Rows of a query as dicts."""
        with self._lock:
            return [dict(r) for r in self._connection().execute(sql, params).fetchall()]

    def close(self) -> None:
        """Close the connection (it reopens on next use)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- failures on demand -------------------------------------------------------------------

    def fail(self, target: str, times: int = 1, message: str = "unavailable") -> None:
        """Make the next ``times`` calls to ``target`` fail (``FOREVER``: until healed)."""
        with self.transaction() as tx:
            tx.execute(
                "insert into faults (target, remaining, message) values (?, ?, ?) "
                "on conflict (target) do update set remaining = excluded.remaining, "
                "message = excluded.message",
                (target, times, message),
            )

    def heal(self, target: str) -> None:
        """Stop failing calls to ``target``."""
        with self.transaction() as tx:
            tx.execute("delete from faults where target = ?", (target,))

    def trip(self, target: str) -> str | None:
        """Count a call to ``target``; return the failure message if this call must fail."""
        with self.transaction() as tx:
            tx.execute(
                "insert into calls (target, count) values (?, 1) on conflict (target) "
                "do update set count = count + 1",
                (target,),
            )
            row = tx.execute(
                "select remaining, message from faults where target = ?", (target,)
            ).fetchone()
            if row is None or row["remaining"] == 0:
                return None
            if row["remaining"] > 0:
                tx.execute(
                    "update faults set remaining = remaining - 1 where target = ?", (target,)
                )
            return str(row["message"])

    def hold(self, target: str, after: int) -> None:
        """Block the caller of ``checkpoint(target)`` once ``after`` writes have been made."""
        with self.transaction() as tx:
            tx.execute(
                "insert into holds (target, after) values (?, ?) on conflict (target) "
                "do update set after = excluded.after, reached = 0",
                (target, after),
            )

    def release(self, target: str) -> None:
        """Let held callers of ``target`` go on; stop holding."""
        with self.transaction() as tx:
            tx.execute("delete from holds where target = ?", (target,))

    def holding(self, target: str) -> bool:
        """True while a caller of ``target`` is blocked by ``hold``."""
        found = self.rows("select after, reached from holds where target = ?", (target,))
        return bool(found) and found[0]["reached"] >= found[0]["after"]

    def checkpoint(self, target: str) -> None:
        """Called by a fake after each write: blocks here while a ``hold`` says so."""
        with self.transaction() as tx:
            tx.execute("update holds set reached = reached + 1 where target = ?", (target,))
        while self.holding(target):
            time.sleep(0.02)

    def calls(self, target: str) -> int:
        """How many calls ``target`` received (failed ones included)."""
        found = self.rows("select count from calls where target = ?", (target,))
        return int(found[0]["count"]) if found else 0
