"""The claim order on PostgreSQL (`statecharts_claim_order`, schema 16): the aging rule as the
interval arithmetic computes it, in any session time zone; inlined by the planner (so no
statement plans its body again); and the claim still read from its index, in priority-aged
order, after a database with due runs upgrades from schema 15. On both stores, calls that
later steps record are claimed in the same priority-aged order as runs."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from persistence import schema
from persistence.runtime import Runtime
from persistence.stores import Store
from persistence.stores.postgres import PostgresStore
from persistence.stores.postgres_statements import lease_sql
from persistence.stores.postgres_values import to_ts
from statecharts import SimulatedClock, create_machine

T0 = 1_700_000_000_000
MINUTE = 60_000

sleeper = create_machine(
    {
        "id": "sleeper",
        "initial": "waiting",
        "states": {"waiting": {"after": {"1000": "done"}}, "done": {"type": "final"}},
    }
)

caller = create_machine(
    {
        "id": "caller",
        "initial": "waiting",
        "states": {
            "waiting": {"on": {"GO": "calling"}},
            "calling": {"invoke": {"src": "charge", "onDone": "done"}},
            "done": {"type": "final"},
        },
    },
    actors={"charge": lambda _input: "paid"},
)


def _session(pg_dsn: str, pg_schema: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(pg_dsn, autocommit=True)
    conn.execute(f'SET search_path = "{pg_schema}"')
    return conn


def test_the_claim_order_is_the_aging_rule_in_any_time_zone_and_inlined(
    pg_dsn: str, pg_schema: str
) -> None:
    PostgresStore(pg_dsn, schema=pg_schema).migrate()
    with _session(pg_dsn, pg_schema) as conn:
        # instants on both sides of daylight-saving changes, and the ends of time
        wakes = [
            "2026-03-08 01:30:00-05",
            "2026-03-08 03:30:00-04",
            "2026-03-29 00:59:59.999+00",
            "2026-10-25 01:00:00.001+00",
            "2026-11-01 01:30:00-04",
            "2000-01-01 00:00:00+00",
            "infinity",
            "-infinity",
        ]
        for zone in ("UTC", "America/New_York", "Europe/Berlin", "Asia/Kolkata"):
            conn.execute(f"SET TimeZone = '{zone}'")
            unequal = conn.execute(
                "SELECT w, p FROM unnest(%s::timestamptz[]) w, unnest(%s::int[]) p "
                "WHERE statecharts_claim_order(w, p) IS DISTINCT FROM "
                "w - make_interval(secs => p * 60)",
                (wakes, [0, 1, 59, 60, 61, 1000]),
            ).fetchall()
            assert unequal == [], zone
        assert conn.execute("SELECT statecharts_claim_order(NULL, 3)").fetchone() == (None,)
        plan = conn.execute("EXPLAIN (VERBOSE) SELECT statecharts_claim_order(now(), 3)")
        text = "\n".join(row[0] for row in plan)
        assert "statecharts_claim_order" not in text, text  # the expression, not a call


@pytest.fixture
def at_schema_15(monkeypatch: pytest.MonkeyPatch) -> None:
    """The migrations up to schema 15, as the code before schema 16 shipped them."""
    real = schema.migrations
    monkeypatch.setattr(schema, "migrations", lambda dialect: real(dialect)[:15])


def test_due_runs_of_a_database_at_schema_15_are_claimed_in_aged_order_from_the_index(
    pg_dsn: str, pg_schema: str, at_schema_15: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresStore(pg_dsn, schema=pg_schema, max_size=2)
    assert store.migrate()[-1] == 15
    clock = SimulatedClock(start=T0)
    runtime = Runtime(store, [sleeper], clock=clock)
    # (priority, minutes after T0 it was started; each is due a second later)
    started = [(0, 0), (5, 8), (0, 2), (10, 9), (1, 5), (3, 4)]
    ids = {}
    for priority, minutes in sorted(started, key=lambda s: s[1]):
        clock.set(T0 + minutes * MINUTE)
        ids[priority, minutes] = runtime.start("sleeper", priority=priority)
    store.close()

    monkeypatch.undo()  # the code's own migrations again: 16 is pending
    store = PostgresStore(pg_dsn, schema=pg_schema, max_size=2)
    assert store.migrate() == [16]
    store.check_schema()
    with _session(pg_dsn, pg_schema) as conn:
        conn.execute("SET enable_seqscan = off")  # (a few rows: make the index the choice)
        plan = conn.execute(
            b"EXPLAIN " + lease_sql(False, store._CLAIM_ORDER).encode(),
            {"now": to_ts(T0 + 60 * MINUTE), "limit": 10, "owner": "w", "exp": to_ts(T0)},
        ).fetchall()
        assert "Index Scan using workflow_runs_claim" in "\n".join(r[0] for r in plan)
    now = T0 + 60 * MINUTE  # (one at a time: a claim's rows come back in no set order)
    claimed = [store.claim_runs("w", now, 30_000, 1)[0].id for _ in started]
    # due at minute m (and a second), aged by a minute per priority level: in order of m - p
    aged = sorted(started, key=lambda s: s[1] - s[0])
    assert claimed == [ids[s] for s in aged]
    store.close()


@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"])
def test_calls_recorded_by_later_steps_are_claimed_in_priority_aged_order(store: Store) -> None:
    clock = SimulatedClock(start=T0)
    runtime = Runtime(store, [caller], clock=clock)
    # (priority, minutes after T0 its GO was sent: the step that records its call)
    sent = [(0, 0), (5, 8), (0, 2), (10, 9), (1, 5), (3, 4)]
    ids = {s: runtime.start("caller", priority=s[0]) for s in sent}
    for s in sorted(sent, key=lambda s: s[1]):
        clock.set(T0 + s[1] * MINUTE)
        runtime.send(ids[s], "GO")  # no worker here: the send's own step records the call
    now = T0 + 60 * MINUTE  # (one at a time: a claim's rows come back in no set order)
    claimed = [store.claim_calls("w", now, 30_000, 1)[0].run_id for _ in sent]
    # recorded at minute m, aged by a minute per priority level: in order of m - p
    aged = sorted(sent, key=lambda s: s[1] - s[0])
    assert claimed == [ids[s] for s in aged]
