"""The durable benchmark's replay row (`benchmarks.durable_runtime.replayed_postgres`): the
statements of one `Inline.run`, sent again by psycopg alone, run whole workflows on a real
PostgreSQL (each replayed run ends `done`), so the row measures the database's real work."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from benchmarks import durable_runtime


def test_the_replayed_statements_run_every_workflow_to_its_end(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = f"t_replay_{uuid.uuid4().hex[:12]}"  # not the benchmark's own database
    monkeypatch.setattr(durable_runtime, "PG_DATABASE", database)
    row = durable_runtime.replayed_postgres(pg_dsn, "PostgreSQL", n=5)
    assert row.ok and row.median > 0 and row.n == 5
    assert durable_runtime.REPLAYED in row.subject
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # dropped afterwards
        assert (
            conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone()
            is None
        )


def test_a_replay_whose_statements_write_nothing_fails(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(durable_runtime, "PG_DATABASE", f"t_replay_{uuid.uuid4().hex[:12]}")

    def in_the_insert_only(value: object, recorded: str, run_id: str) -> object:
        # each run inserted as itself, its steps aimed at the recorded run: none of them ends
        if isinstance(value, dict) and "name" in value:  # the start's (flat) parameters
            return {
                k: v.replace(recorded, run_id) if isinstance(v, str) else v
                for k, v in value.items()
            }
        return value

    monkeypatch.setattr(durable_runtime, "_with_run_id", in_the_insert_only)
    with pytest.raises(AssertionError, match="runs ended"):
        durable_runtime.replayed_postgres(pg_dsn, "PostgreSQL", n=3)
