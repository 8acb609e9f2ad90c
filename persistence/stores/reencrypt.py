"""Re-encryption of stored payloads under the current key (`statecharts db reencrypt`).

After a new key is put first in the key ring, payloads sealed with an older key still open (the
older key is still in the ring) but the older key cannot be removed until none is left. This
rewrites them, and payloads written in clear before encryption was turned on, under the current
key: table by table, in primary-key order, `batch` rows per transaction, each row written only
if it is still what was read (a worker's concurrent step wins and writes it under its own key).
Rows sealed with a key the ring lacks are left as they are and counted; nothing loops: each
row is visited once.
"""

from __future__ import annotations

from typing import Any

from persistence.stores.codec import Column, KeyConfigError, PayloadCodecError, sealed_key
from persistence.stores.dialect import SQLDialect
from persistence.stores.records import ReencryptReport

_EFFECT_KEY = ("run_id", "step", "effect_index")
PAYLOAD_COLUMNS: tuple[tuple[str, tuple[str, ...], str, str, str], ...] = (
    ("workflow_runs", ("id",), "id", "snapshot", Column.SNAPSHOT),
    ("workflow_effects", _EFFECT_KEY, "run_id", "payload", Column.EFFECT_PAYLOAD),
    ("workflow_effects", _EFFECT_KEY, "run_id", "result", Column.EFFECT_RESULT),
    ("workflow_inbox", ("id",), "run_id", "event", Column.EVENT),
    ("workflow_events", ("run_id", "id"), "run_id", "event", Column.JOURNAL),
    ("workflow_events", ("run_id", "id"), "run_id", "snapshot", Column.SNAPSHOT),
    ("workflow_calls", ("idempotency_key",), "run_id", "payload", Column.CALL_PAYLOAD),
    ("workflow_calls", ("idempotency_key",), "run_id", "details", Column.CALL_DETAILS),
)
"""Every sealed column: (table, primary key, run-id column, column, its name in the associated
data)."""


class SQLReencrypt(SQLDialect):
    """`reencrypt_payloads` in SQL, mixed into `sql.SQLStore` over its dialect hooks."""

    def reencrypt_payloads(self, batch: int = 500) -> ReencryptReport:
        """Rewrite every payload not sealed with the current key (sealed with an older key of
        the ring, or in clear) under the current key; see the module's docstring."""
        ring = self._ring
        if ring is None:
            raise KeyConfigError(
                "reencrypt needs the keys: set STATECHARTS_KEYS or "
                "STATECHARTS_KEYS_FILE (the new key first)"
            )
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        report = ReencryptReport()
        for table, key, run_column, column, name in PAYLOAD_COLUMNS:
            after: tuple[Any, ...] | None = None
            while True:
                after = self._reencrypt_batch(
                    table, key, run_column, column, name, after, batch, report
                )
                if after is None:
                    break
        return report

    def _reencrypt_batch(
        self,
        table: str,
        key: tuple[str, ...],
        run_column: str,
        column: str,
        name: str,
        after: tuple[Any, ...] | None,
        batch: int,
        report: ReencryptReport,
    ) -> tuple[Any, ...] | None:
        """One transaction: the next `batch` rows of `table` (after the key `after`) whose
        `column` is not sealed with the current key, rewritten; the last key read (None: the
        table is done)."""
        ring = self._ring
        assert ring is not None
        sealed_by = self._SEALED_KEY.format(column=column)
        keys = ", ".join(key)
        where = f"{column} IS NOT NULL AND ({sealed_by} IS NULL OR {sealed_by} <> ?)"
        params: list[Any] = [ring.current]
        if after is not None:
            where += f" AND ({keys}) > ({', '.join('?' * len(key))})"
            params += after
        with self._write() as conn:
            rows = self._exec(
                conn,
                f"SELECT {keys}, {run_column}{self._TEXT_ID} AS of_run, {column} FROM {table} "
                f"WHERE {where} ORDER BY {keys} LIMIT ?",
                (*params, batch),
            ).fetchall()
            for row in rows:
                *pk, run_id, stored = row
                self._reencrypt_row(conn, table, key, column, name, pk, str(run_id), stored, report)
        return tuple(rows[-1][: len(key)]) if len(rows) == batch else None

    def _reencrypt_row(
        self,
        conn: Any,
        table: str,
        key: tuple[str, ...],
        column: str,
        name: str,
        pk: list[Any],
        run_id: str,
        stored: Any,
        report: ReencryptReport,
    ) -> None:
        """One row's payload opened and sealed again, written only if still as read."""
        assert self._ring is not None
        try:
            value = self._open(stored, run_id, name)
        except PayloadCodecError as exc:
            held = sealed_key(self._load(stored)) or "?"
            report.unreadable[held] = report.unreadable.get(held, 0) + 1
            report.note(str(exc))
            return
        except ValueError:  # a snapshot that is not JSON (a broken row): left to its claim
            report.note(f"run {run_id}: {table}.{column} is not JSON; left as is")
            return
        was = stored if self.dialect == "sqlite" else self._j(stored)
        match = " AND ".join(f"{k} = ?" for k in key)
        written = self._exec(
            conn,
            f"UPDATE {table} SET {column} = ? WHERE {match} AND {column} = ?",
            (self._seal(value, run_id, name), *pk, was),
        )
        if written.rowcount == 1:
            report.rewritten += 1
        else:
            report.changed += 1
