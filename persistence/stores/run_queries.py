"""The operator's reads in SQL (`RunQueries`), written once for both dialects: runs listed,
searched, counted and grouped (the WHERE clause is `queries.run_query_sql`), a run's outbox,
journal, dead letters and search attributes, stuck runs and unknown versions.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from persistence.stores.codec import Column
from persistence.stores.dialect import DEAD_NAMES, SQLDialect
from persistence.stores.queries import known_status, run_query_sql
from persistence.stores.records import (
    DeadLetter,
    EffectRecord,
    EventProgress,
    EventRecord,
    RunQuery,
    RunRecord,
    VersionCount,
)
from persistence.stores.rules import (
    check_group_column,
    check_last,
)


class SQLQueries(SQLDialect):
    """`RunQueries` in SQL: the operator's listings, counts and reports."""

    def list_runs(
        self,
        status: str | None = None,
        workflow_name: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[RunRecord]:
        """Runs newest first, filtered."""
        where, params = self._where(RunQuery(status=status, workflow_name=workflow_name))
        rows = self._read(
            f"SELECT {self.RUN_COLUMNS} FROM workflow_runs {where} "
            "ORDER BY created_at DESC, id LIMIT ? OFFSET ?",
            (*params, limit, offset),
        )
        return [self._run(r) for r in rows]

    def _where(self, query: RunQuery) -> tuple[str, list[Any]]:
        return run_query_sql(query, "?", self._t)

    def search_runs(self, query: RunQuery, limit: int = 50, offset: int = 0) -> list[RunRecord]:
        """Runs matching `query`, newest first."""
        where, params = self._where(query)
        rows = self._read(self._page_sql(where), (*params, limit, offset))
        return [self._run(r) for r in rows]

    def _page_sql(self, where: str) -> str:
        """One page of the runs matching `where`, newest first (LIMIT and OFFSET last)."""
        return (
            f"SELECT {self.RUN_COLUMNS} FROM workflow_runs {where} "
            "ORDER BY created_at DESC, id LIMIT ? OFFSET ?"
        )

    def count_runs(self) -> dict[str, int]:
        """Runs per status."""
        rows = self._read("SELECT status, count(*) FROM workflow_runs GROUP BY status")
        return {status: int(n) for status, n in rows}

    def count_matching(self, query: RunQuery) -> dict[str, int]:
        """Runs matching `query`, per status."""
        where, params = self._where(query)
        status = known_status(query)
        if status is not None:
            n = int(self._read(f"SELECT count(*) FROM workflow_runs {where}", params)[0][0])
            return {status: n} if n else {}
        group = self._STATUS_GROUP if query.state is not None else "status"
        rows = self._read(
            f"SELECT status, count(*) FROM workflow_runs {where} GROUP BY {group}", params
        )
        return {status: int(n) for status, n in rows}

    def run_groups(
        self, column: str, workflow_name: str | None = None
    ) -> list[tuple[str, str, int]]:
        """(value, status, runs) per group of runs."""
        check_group_column(column)
        where, params = self._where(RunQuery(workflow_name=workflow_name))
        rows = self._read(
            f"SELECT {column}, status, count(*) FROM workflow_runs {where} "
            f"GROUP BY {column}, status ORDER BY {column}, status",
            params,
        )
        return [(value, status, int(n)) for value, status, n in rows]

    def list_effects(
        self, run_id: str, status: str | None = None, *, last: int | None = None
    ) -> list[EffectRecord]:
        """Outbox rows of a run in (step, index) order (the newest `last` of them)."""
        check_last(last)
        sql = f"SELECT {self.EFFECT_COLUMNS} FROM workflow_effects WHERE run_id = ?"
        params: tuple[Any, ...] = (self._id(run_id),)
        if status is not None:
            sql += " AND status = ?"
            params += (status,)
        sql += " ORDER BY step DESC, effect_index DESC"
        if last is not None:
            sql += " LIMIT ?"
            params += (last,)
        return [self._effect(r) for r in reversed(self._read(sql, params))]

    def error_traceback(self, run_id: str) -> str | None:
        """The traceback recorded with the run's failure, if any."""
        rows = self._read(
            "SELECT error_traceback FROM workflow_runs WHERE id = ?", (self._id(run_id),)
        )
        return str(rows[0][0]) if rows and rows[0][0] is not None else None

    def list_events(self, run_id: str, *, last: int | None = None) -> list[EventRecord]:
        """Journal rows of a run, oldest first (the newest `last` of them)."""
        check_last(last)
        sql = (
            f"SELECT id, run_id{self._TEXT_ID}, step, event, state_before, state_after, "
            "created_at FROM workflow_events WHERE run_id = ? ORDER BY id DESC"
        )
        params: tuple[Any, ...] = (self._id(run_id),)
        if last is not None:
            sql += " LIMIT ?"
            params += (last,)
        return [
            EventRecord(i, r, s, self._open(e, r, Column.JOURNAL), b, a, self._ms(c))
            for i, r, s, e, b, a, c in reversed(self._read(sql, params))
        ]

    def count_events(self, run_id: str) -> int:
        """Journal rows of a run."""
        return int(
            self._read(
                "SELECT count(*) FROM workflow_events WHERE run_id = ?", (self._id(run_id),)
            )[0][0]
        )

    def event_progress(self, run_id: str, inbox_id: int) -> EventProgress:
        """Where the event of inbox row `inbox_id` stands: its inbox row read first, then its
        journal entry (which a step writes as it deletes the row), so that a step committing
        between the two reads is seen by the second."""
        rid = self._id(run_id)
        queued, journaled = self._read_all(
            [
                (
                    "SELECT dead_reason FROM workflow_inbox WHERE run_id = ? AND id = ?",
                    (rid, inbox_id),
                ),
                (
                    "SELECT step, state_after FROM workflow_events "
                    "WHERE run_id = ? AND inbox_id = ? "
                    "ORDER BY id DESC LIMIT 1",
                    (rid, inbox_id),
                ),
            ]
        )
        if journaled:
            return EventProgress("applied", int(journaled[0][0]), str(journaled[0][1]))
        if not queued:  # applied by a step that journaled nothing
            return EventProgress("applied")
        reason = queued[0][0]
        return EventProgress("queued") if reason is None else EventProgress("dead", reason=reason)

    def match_ids(self, query: RunQuery, after: str | None = None, limit: int = 500) -> list[str]:
        """Ids of runs matching `query` after `after`, in id order (a bulk action's page)."""
        where, params = self._where(query)
        if after is not None:
            where = f"{where} AND id > ?" if where else "WHERE id > ?"
            params.append(self._id(after))
        rows = self._read(
            f"SELECT id{self._TEXT_ID} FROM workflow_runs {where} ORDER BY id LIMIT ?",
            (*params, limit),
        )
        return [str(r[0]) for r in rows]

    def search_attributes(self, run_id: str) -> dict[str, str]:
        """The run's search attributes."""
        rows = self._read(
            "SELECT name, value FROM workflow_search WHERE run_id = ? ORDER BY name",
            (self._id(run_id),),
        )
        return {str(n): str(v) for n, v in rows}

    def dead_letters(self, run_id: str) -> list[DeadLetter]:
        """Events of the run that can no longer be applied, oldest first."""
        rows = self._read(
            f"SELECT {DEAD_NAMES.format(t=self._TEXT_ID)} FROM workflow_inbox "
            "WHERE run_id = ? AND dead_at IS NOT NULL ORDER BY id",
            (self._id(run_id),),
        )
        return [self._dead(r) for r in rows]

    def stuck_runs(self, now: int, older_than_ms: int, limit: int = 100) -> list[RunRecord]:
        """Active runs untouched for `older_than_ms`, not waiting for a later timer."""
        where, params = self._where(RunQuery(stuck_before=now - older_than_ms))
        rows = self._read(
            f"SELECT {self.RUN_COLUMNS} FROM workflow_runs {where} "
            "ORDER BY updated_minute, updated_at LIMIT ?",  # (the same order as updated_at's)
            (*params, limit),
        )
        return [self._run(r) for r in rows]

    def unknown_versions(self, known: Collection[tuple[str, str]]) -> list[VersionCount]:
        """Active runs grouped by versions not in `known`."""
        rows = self._read(
            f"SELECT workflow_name, workflow_version, count(*), {self._JSON_VERSION}"
            " FROM workflow_runs WHERE status = 'active' GROUP BY 1, 2, 4 ORDER BY 1, 2, 4"
        )
        wanted = set(known)
        return [VersionCount(n, v, int(c), lb) for n, v, c, lb in rows if (n, v) not in wanted]
