"""Schema 6 (migrations/*/0006_hot_steps.sql): a step that leaves a run's indexed columns as they
were updates its PostgreSQL row in place (HOT: counted by the server in pg_stat_user_tables, not
timed), the stuck-runs index works over the minute of the last update, and a database at
schema 5 with runs in it upgrades to 6 with its runs, journal and stuck runs as they were."""

from __future__ import annotations

import collections
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from persistence import schema
from persistence.runtime import Runtime
from persistence.stores import (
    ConflictError,
    EffectOutcome,
    JournalEntry,
    NewEffect,
    NewRun,
    RunQuery,
    StepCommit,
    Store,
    inbox,
    postgres_statements,
    steps,
)
from persistence.stores.postgres import PostgresStore
from persistence.stores.sqlite import SQLiteStore
from statecharts import SimulatedClock, assign, create_machine
from tests.persistence.conftest import wait_for

T0 = 1_700_000_000_000
MINUTE = 60_000

counter = create_machine(
    {
        "id": "counter",
        "initial": "counting",
        "context": {"n": 0},
        "states": {
            "counting": {"on": {"INC": {"actions": "inc"}, "FINISH": "done"}},
            "done": {"type": "final"},
        },
    },
    actions={"inc": assign({"n": lambda context, event: context["n"] + 1})},
)


def _updates(dsn: str, schema_name: str) -> tuple[int, int]:
    """(updates, HOT updates) of the schema's workflow_runs, as the server counted them."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
            "WHERE schemaname = %s AND relname = 'workflow_runs'",
            (schema_name,),
        ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def _counted(dsn: str, schema_name: str, updates: int) -> tuple[int, int]:
    """The counts once the closed store's sessions have reported them (at their exit)."""
    wait_for(lambda: _updates(dsn, schema_name)[0] >= updates)
    return _updates(dsn, schema_name)


def test_a_step_that_changes_no_indexed_column_is_a_hot_update(pg_dsn: str, pg_schema: str) -> None:
    store = PostgresStore(pg_dsn, schema=pg_schema, max_size=2)
    store.migrate()
    runtime = Runtime(store, [counter], clock=SimulatedClock(start=T0))
    run_id = runtime.start("counter")
    for _ in range(10):  # each applied in the send (the run is at rest): one update each
        runtime.send(run_id, "INC")
    assert runtime.get(run_id).snapshot["context"] == {"n": 10}
    store.close()
    assert _counted(pg_dsn, pg_schema, 10) == (10, 10)  # snapshot, version, updated_at: HOT

    store = PostgresStore(pg_dsn, schema=pg_schema, max_size=2)
    runtime = Runtime(store, [counter], clock=SimulatedClock(start=T0 + 1000))
    runtime.send(run_id, "FINISH")  # state and status change: indexed, so not in place
    assert runtime.get(run_id).status == "done"
    store.close()
    assert _counted(pg_dsn, pg_schema, 11) == (11, 10)


LEAF_ENTRIES = ("Btree INSERT_LEAF", "Btree INSERT_POST")
"""The WAL records of an index entry (INSERT_POST: a duplicate key, kept in a posting list)."""


@pytest.fixture
def private_database(pg_dsn: str) -> Iterator[str]:
    """The DSN of a database of its own, dropped afterwards: the server prunes a page only
    where no older snapshot may see its dead row versions, and the snapshots that count are
    those of the same database's sessions: other tests' (and other suites') in `test` then
    cannot hold this test's pages unpruned."""
    from benchmarks.databases import scratch_database

    with scratch_database(pg_dsn, f"statecharts_hot_{uuid.uuid4().hex[:8]}") as url:
        yield url


def test_a_step_from_rest_writes_no_index_entry_of_its_run(private_database: str) -> None:
    from benchmarks import step_wal

    url = f"{private_database}?schema=hot"
    result = step_wal.measure(url, "rest", 60, runs_at_rest=20)  # the WAL the server wrote
    inserted, updated, hot = result["tables"]["workflow_runs"]
    assert (inserted, updated) == (20, 80)  # 20 steps warm up, then the 60 measured
    # Not HOT, by design: the step that crosses into a new minute (it changes updated_minute,
    # which the stuck-runs index holds). Not HOT, now and then: a step whose page is full, as
    # the server prunes a page only when it can (its cleanup lock, no older snapshot that may
    # see the dead versions): 79 of 80 HOT under load, 26-64 of 80 beside other PostgreSQL
    # test files in the same database, 80 of 80 alone (hence a database of its own). A step
    # that changed an indexed column is never HOT. Every step here changes the same columns,
    # so one HOT step shows they are none of the indexed ones; how many are HOT is pruning's
    # luck (26 of 80 seen again in a database of its own, beside the full suite on 2 cores).
    assert hot > 0
    entries = collections.Counter(
        relation
        for (kind, relation), (count, _) in result["kinds"].items()
        for _ in range(count)
        if kind in LEAF_ENTRIES
    )
    assert entries.pop("workflow_events_pkey") == 60  # the journal row's
    run_indexes = _run_indexes(private_database, "hot")
    assert set(entries) <= set(run_indexes)  # and nothing else's
    assert all(count <= updated - hot for count in entries.values())  # only the steps not HOT
    assert result["transactions"] == 60


def _run_indexes(dsn: str, schema_name: str) -> list[str]:
    """The names of the schema's indexes on workflow_runs."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND "
            "tablename = 'workflow_runs'",
            (schema_name,),
        ).fetchall()
    return [row[0] for row in rows]


def _checked_in_statement(sql: str) -> str:
    """A step from rest that checks in its own statement that nothing is queued or pending for
    its run, as released before schema 15's function (`statecharts_still_at_rest`)."""
    return re.sub(
        r"statecharts_still_at_rest\((r\.id|%\(id\)s::uuid)\)",
        lambda m: (
            f"(NOT EXISTS (SELECT 1 FROM workflow_inbox i WHERE i.run_id = {m[1]} AND "
            f"i.dead_at IS NULL) AND NOT EXISTS (SELECT 1 FROM workflow_effects e WHERE "
            f"e.run_id = {m[1]} AND e.status = 'pending'))"
        ),
        sql,
    )


@pytest.fixture
def at_schema_5(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Migrations stop at version 5 (as released before schema 6) until the test lets go; an
    event is queued as that release did, without the inbox's `call_key` (schema 8: the call
    whose result it is, never one for a sent event), and a step is written as it did: its
    journal without the inbox ids, no waiters told (schema 11), a step from rest checked in its
    own statement (schema 15)."""
    real = schema.migrations
    monkeypatch.setattr(schema, "migrations", lambda dialect: real(dialect)[:5])
    released = inbox._QUEUE_EVENT.replace(
        ", call_key) SELECT id, ?, ?, ?, ? FROM workflow_runs WHERE id = ?",
        ") SELECT id, ?, ?, ? FROM workflow_runs WHERE CAST(? AS text) IS NULL AND id = ?",
    )
    assert "call_key" not in released
    for queues in (inbox, steps):  # (`send_event`; `send_and_step`)
        monkeypatch.setattr(queues, "_QUEUE_EVENT", released)
    # ... and a step's journal rows without their inbox row or the snapshot after the step
    monkeypatch.setattr(
        steps,
        "JOURNAL_INSERT",
        steps.JOURNAL_INSERT.replace(
            ", inbox_id, snapshot) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            ") SELECT ?, ?, ?, ?, ?, ? WHERE coalesce(?, 0) IS NOT NULL "
            "AND (CAST(? AS text) IS NULL OR 1 = 1)",
        ),
    )
    journal = postgres_statements.STEPS_PARTS["journal"]
    monkeypatch.setitem(
        postgres_statements.STEPS_PARTS,
        "journal",
        journal.replace(",\n                                 inbox_id, snapshot)", ")").replace(
            ", j.inbox,\n           CASE WHEN j.last THEN run.snapshot END\n", "\n"
        ),
    )
    assert "snapshot" not in postgres_statements.STEPS_PARTS["journal"]
    steps_sql = postgres_statements.steps_sql
    steps_sql.cache_clear()  # (statements built before hold the journal's inbox id)
    monkeypatch.setattr(
        postgres_statements,
        "steps_sql",
        lambda *args: _checked_in_statement(
            steps_sql(*args).replace(postgres_statements.TOLD, "false AS told")
        ),
    )
    monkeypatch.setattr(PostgresStore, "_tell_waiters_in", lambda *args: None)
    yield
    monkeypatch.setattr(schema, "migrations", real)
    steps_sql.cache_clear()


def _open(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "runs.db")
    return PostgresStore(
        request.getfixturevalue("pg_dsn"), schema=request.getfixturevalue("pg_schema"), max_size=2
    )


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_database_at_schema_5_with_runs_upgrades_and_finds_the_same_stuck_runs(
    kind: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    at_schema_5: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = _open(kind, tmp_path, request)
    assert store.migrate() == [1, 2, 3, 4, 5]
    clock = SimulatedClock(start=T0)
    runtime = Runtime(store, [counter], clock=clock)
    ids = []
    for i in range(4):  # last touched at T0, T0 + 0.5 min, ... (two of them in one minute)
        clock.advance(i * MINUTE // 2)
        ids.append(runtime.start("counter"))
        runtime.send(ids[-1], "INC")
    runtime.send(ids[3], "FINISH")  # ended: never stuck
    waiting, _ = store.create_run(  # effects written at schema 5, pending; due later: not stuck
        NewRun(
            id=str(uuid.uuid4()),
            workflow_name="mailer",
            workflow_version="v1",
            key=None,
            state="sending",
            snapshot={"value": "sending"},
            wake_at=T0 + 15 * MINUTE,
        ),
        [NewEffect(i, "run_action", {"type": f"mail{i}"}) for i in range(2)],
        T0,
    )
    store.close()

    monkeypatch.undo()  # the code's own migrations again: 6 and those after it are pending
    store = _open(kind, tmp_path, request)
    assert store.migrate() == [m.version for m in schema.migrations(kind)][5:] != []
    store.check_schema()
    assert [run.id for run in store.stuck_runs(T0 + 10 * MINUTE, 0)] == ids[:3]  # oldest first
    # T0 is 20 s into its minute: the second run's minute is below the mark, its update is not
    mark = T0 + 20_000
    assert [run.id for run in store.stuck_runs(mark, 0)] == ids[:1]
    assert store.count_matching(RunQuery(stuck_before=mark)) == {"active": 1}
    assert [(e.event["type"], e.step) for e in store.list_events(ids[3])] == [
        ("INC", 2),
        ("FINISH", 3),
    ]
    runtime = Runtime(store, [counter], clock=SimulatedClock(start=T0 + 20 * MINUTE))
    runtime.send(ids[0], "INC")  # the upgraded rows step as before
    assert runtime.get(ids[0]).snapshot["context"] == {"n": 2}
    assert [run.id for run in store.stuck_runs(T0 + 10 * MINUTE, 0)] == ids[1:3]

    # the outbox keeps its keys; its outcomes are recorded once, a replayed step writes nothing
    keys = [e.idempotency_key for e in store.list_effects(waiting.id, status="pending")]
    assert keys == [f"{waiting.id}:1:0", f"{waiting.id}:1:1"]
    store.claim_runs("w1", T0 + 20 * MINUTE, 30_000, 10)
    commit = StepCommit(
        run_id=waiting.id,
        owner="w1",
        expected_version=1,
        state="sent",
        snapshot={"value": "sent"},
        status="done",
        effect_outcomes=[EffectOutcome(k, "done", {"n": i}) for i, k in enumerate(keys)],
        new_effects=[NewEffect(0, "emit", {"type": "SENT"})],
        journal=[JournalEntry({"type": "xstate.done.actor.mail"}, "sending", "sent")],
    )
    assert store.commit_step(commit, T0 + 20 * MINUTE) == 2
    with pytest.raises(ConflictError):
        store.commit_step(commit, T0 + 20 * MINUTE)
    assert [
        (e.idempotency_key, e.step, e.status, e.result) for e in store.list_effects(waiting.id)
    ] == [
        (keys[0], 1, "done", {"n": 0}),
        (keys[1], 1, "done", {"n": 1}),
        (f"{waiting.id}:2:0", 2, "pending", None),
    ]
    store.close()
