"""PostgreSQL's connection use: every statement gives its connection back, whatever happens.

The store checks connections out of its pool itself (`postgres_connections.Checkout`) and runs
its hot statements on one cursor kept per connection. These tests use a pool of ONE connection, so a
connection not given back, a transaction left open or a result left on the cursor shows at
the next call (a `StoreUnavailableError` after the pool's timeout, a wrong row, a row not
written); the last, of three, checks which connection the pool hands out next."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg_pool
import pytest

from persistence.stores import ConflictError, NewRun, StepCommit, StoreEncodingError
from persistence.stores.postgres import PostgresStore
from tests.persistence.conftest import wait_for

T0 = 1_700_000_000_000


@pytest.fixture
def one(pg_dsn: str, pg_schema: str) -> Iterator[PostgresStore]:
    """A migrated store whose pool holds one connection (a short timeout: a leak fails fast)."""
    store = PostgresStore(pg_dsn, schema=pg_schema, min_size=1, max_size=1, connect_timeout_s=2)
    store.migrate()
    yield store
    store.close()


def _run(key: str | None = None, state: str = "a") -> NewRun:
    return NewRun(
        id=str(uuid.uuid4()),
        workflow_name="order",
        workflow_version="v1",
        key=key,
        state=state,
        snapshot={"value": "a", "n": 1},
        wake_at=None,
    )


def test_refused_values_and_conflicts_give_the_connection_back(one: PostgresStore) -> None:
    kept, _ = one.create_run(_run("k1"), [], T0)
    for _ in range(3):  # more refusals than the pool has connections
        with pytest.raises(StoreEncodingError):
            one.create_run(_run(state="a\x00b"), [], T0)
        with pytest.raises(ConflictError):  # a stale step: written by nobody
            one.commit_step(StepCommit(kept.id, "nobody", 7, "b", {"value": "b"}, "active"), T0)
    again, created = one.create_run(_run("k1"), [], T0)
    assert (again.id, created) == (kept.id, False)
    assert one.get_run(kept.id).snapshot == {"value": "a", "n": 1}


def test_a_failed_transaction_is_rolled_back_and_the_next_statement_is_its_own(
    one: PostgresStore,
) -> None:
    with pytest.raises(StoreEncodingError), one._write() as conn:
        conn.execute(
            "INSERT INTO workflow_schedules (name, last_fire_at, version) "
            "VALUES ('nightly', now(), 1)"
        )
        conn.execute("SELECT %s::text", ("a\x00b",))
    with one._connection() as conn:  # the one connection, idle: the insert was rolled back
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert conn.execute("SELECT count(*) FROM workflow_schedules").fetchone() == (0,)


def test_a_transaction_left_open_in_a_block_is_committed_when_it_ends(
    one: PostgresStore,
) -> None:
    with one._connection() as conn:
        conn.execute("BEGIN")
        conn.execute(
            "INSERT INTO workflow_schedules (name, last_fire_at, version) "
            "VALUES ('nightly', now(), 1)"
        )
    with one._connection() as conn:
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert conn.execute("SELECT name FROM workflow_schedules").fetchall() == [("nightly",)]


def test_an_outage_while_checked_out_is_unavailable_and_the_pool_replaces_the_connection(
    one: PostgresStore, pg_dsn: str
) -> None:
    from persistence.stores import StoreUnavailableError

    run, _ = one.create_run(_run(), [], T0)
    with pytest.raises(StoreUnavailableError), one._connection() as conn:
        with psycopg.connect(pg_dsn, autocommit=True) as killer:
            killer.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        conn.execute("SELECT 1")
    assert one.get_run(run.id).id == run.id  # a new connection, given out by the pool


def test_a_callers_pool_is_configured_and_gets_its_connections_back(
    pg_dsn: str, pg_schema: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{pg_schema}"')
    pool = psycopg_pool.ConnectionPool(
        pg_dsn,
        kwargs={"autocommit": True, "options": f"-c search_path={pg_schema}"},
        min_size=1,
        max_size=1,
        timeout=2,
        open=True,
    )
    try:
        store = PostgresStore(pool=pool)
        store.migrate()
        run, _ = store.create_run(_run(), [], T0)
        for _ in range(3):
            assert store.get_run(run.id).snapshot == {"value": "a", "n": 1}  # parsed: configured
        assert pool.get_stats()["pool_available"] == 1
    finally:
        pool.close()


def test_sends_stepped_from_rest_in_one_pipeline_keep_the_one_connection_usable(
    one: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    from persistence.runtime import Runtime
    from statecharts import assign, create_machine

    machine = create_machine(
        {
            "id": "counter",
            "initial": "idle",
            "context": {"n": 0},
            "states": {"idle": {"on": {"INC": {"actions": "inc"}}}},
        },
        actions={"inc": assign({"n": lambda c, e: c["n"] + 1})},
    )
    runtime = Runtime(one, machines=[machine])
    other_store = PostgresStore(pg_dsn, schema=pg_schema, max_size=1)
    try:
        other = Runtime(other_store, machines=[machine])
        run_id = runtime.start("counter")
        for i in range(6):
            runtime.send(run_id, "INC")  # from rest, or (after the other's) the locked path
            if i % 2:
                other.send(run_id, "INC")  # the row this runtime kept is stale now
    finally:
        other_store.close()
    assert runtime.get(run_id).snapshot["context"] == {"n": 9}
    assert [e.event["type"] for e in one.list_events(run_id)] == ["INC"] * 9
    with one._connection() as conn:
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_the_inline_profile_counts_the_statements_run_on_the_kept_cursor(
    pg_dsn: str, pg_schema: str
) -> None:
    from benchmarks import inline_profile

    url = f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}schema={pg_schema}"
    result = inline_profile.profile(url, n=3)
    # the insert (which leases the first call to the caller), then per call its end with the
    # step that applies its result, written from rest: one statement that locks the run's row
    # and writes the step (4 statements and round trips per workflow in all); the run itself
    # is never claimed nor committed under a lease
    assert result["statements"] == 1.0 + 3
    assert result["phases"][inline_profile.PSYCOPG] > 0


@pytest.fixture
def pool_of_two(pg_dsn: str, pg_schema: str) -> Iterator[PostgresStore]:
    store = PostgresStore(pg_dsn, schema=pg_schema, min_size=1, max_size=2)
    store.migrate()
    yield store
    store.close()


def test_a_step_commit_picked_as_a_deadlock_victim_is_run_again_not_failed(
    pool_of_two: PostgresStore, pg_dsn: str, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 47: a batch commit of two runs' steps and another writer lock the two run rows in
    opposite order: PostgreSQL rolls the commit back as the deadlock's victim (SQLSTATE 40P01;
    the other writer's deadlock check is set later, so the commit's runs first). The store runs
    the commit again after a backoff, logged, and both steps are written: no error reaches
    the worker, whose step's effects have already run (before, it raised)."""
    store = pool_of_two
    runs = [
        store.create_run(
            NewRun(str(uuid.uuid4()), "order", "v1", None, "a", {"n": 0}, wake_at=T0), [], T0
        )[0]
        for _ in range(2)
    ]
    claimed = {r.id: r for r in store.claim_runs("w", T0, 60_000, 10)}
    first, second = (claimed[r.id] for r in runs)
    commits = [
        StepCommit(r.id, "w", r.version, "b", {"n": 1}, "active", wake_at=T0 + 1)
        for r in (first, second)
    ]
    caplog.set_level(logging.WARNING, "statecharts.store")
    with psycopg.connect(pg_dsn, options=f"-c search_path={pg_schema}") as other:
        other.execute("SET deadlock_timeout = '30s'")  # (so the commit's check finds it)
        other.execute("SELECT 1 FROM workflow_runs WHERE id = %s FOR UPDATE", (second.id,))
        out: list[Any] = []
        commit = threading.Thread(target=lambda: out.append(store.commit_steps(commits, T0 + 1)))
        commit.start()
        with psycopg.connect(pg_dsn, autocommit=True) as watch:  # it waits for the second row
            wait_for(
                lambda: (
                    watch.execute(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE %s = ANY(pg_blocking_pids(pid))",
                        (other.info.backend_pid,),
                    ).fetchone()
                    == (1,)
                ),
                30,
            )
        # the first row is the commit's now: asking for it closes the cycle; the commit's
        # backend finds it (1 s) and is rolled back, and this statement gets the row
        other.execute("SELECT 1 FROM workflow_runs WHERE id = %s FOR UPDATE", (first.id,))
        other.rollback()
    commit.join(30)
    assert out == [[first.version + 1, second.version + 1]], out
    assert "SQLSTATE 40P01" in caplog.text and "attempt 2 of" in caplog.text
    assert "commit_steps" in caplog.text
    assert [store.get_run(r.id).snapshot for r in runs] == [{"n": 1}, {"n": 1}]


def test_one_caller_at_a_time_uses_the_connection_it_gave_back_last(
    pg_dsn: str, pg_schema: str
) -> None:
    """Once the pool has grown, statements run one at a time all go to one backend (the one
    given back last): the others stay idle, to be closed when the pool shrinks. psycopg's own
    order handed each statement the connection idle longest, every backend in turn."""
    store = PostgresStore(pg_dsn, schema=pg_schema, min_size=1, max_size=3)
    try:
        store.migrate()
        with store._connection() as a, store._connection() as b, store._connection() as c:
            held = [_backend(a), _backend(b), _backend(c)]  # the pool grows to three
        # (the `with` gives c back first, then b, then a)
        backends = []
        for _ in range(6):
            with store._connection() as conn:
                backends.append(_backend(conn))
        assert len(set(held)) == 3 and backends == [held[0]] * 6, (held, backends)
    finally:
        store.close()


def _backend(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0])
