"""`persistence.stores.conflicts`: what is run again when the database rolls a transaction back
to resolve a conflict (a deadlock's victim, a serialization failure), and what never is. The
deadlocks themselves are real in `test_postgres_connections.py` and `test_capacity_faults.py`;
here the rule, with the errors as the PostgreSQL store raises them."""

from __future__ import annotations

import psycopg
import pytest

from persistence.stores import StoreError, StoreUnavailableError
from persistence.stores.conflicts import ATTEMPTS, count_ended, run_again


def _deadlock() -> StoreError:
    """A deadlock victim's error as the store raises it (psycopg's error as its cause)."""
    try:
        raise psycopg.errors.DeadlockDetected("deadlock detected")
    except psycopg.Error as exc:
        try:
            raise StoreUnavailableError(f"PostgreSQL unavailable: {exc}") from exc
        except StoreError as mapped:
            return mapped


def test_work_rolled_back_before_anything_committed_is_run_again() -> None:
    tries = [0]

    def work() -> str:
        tries[0] += 1
        if tries[0] < 3:
            raise _deadlock()
        count_ended()
        return "written"

    assert run_again(work, "test work") == "written"
    assert tries == [3]


def test_work_that_committed_a_transaction_before_the_conflict_is_not_run_again() -> None:
    tries = [0]

    def work() -> None:
        tries[0] += 1
        count_ended()  # its first transaction committed: running it again would repeat it
        raise _deadlock()

    with pytest.raises(StoreUnavailableError, match="deadlock detected"):
        run_again(work, "test work")
    assert tries == [1]


def test_a_conflict_that_keeps_coming_is_raised_after_the_last_attempt() -> None:
    tries = [0]

    def work() -> None:
        tries[0] += 1
        raise _deadlock()

    with pytest.raises(StoreUnavailableError):
        run_again(work, "test work")
    assert tries == [ATTEMPTS]


def test_every_store_method_that_opens_a_write_transaction_is_run_again_on_a_conflict() -> None:
    """The rule holds for store calls written later too (the lifecycle's purge, fork, reset
    and key expiry were not, and a conflict reached the operator): a public method of the SQL
    stores that opens a write transaction itself is `retried`, but for the capacity calls,
    which run each of their transactions again (`run_again`), and migrations (Citus's own
    writes too: its heartbeat of calls was not)."""
    import inspect
    import re

    from persistence.stores.citus import CitusStore
    from persistence.stores.postgres import PostgresStore
    from persistence.stores.sqlite import SQLiteStore

    opens = re.compile(r"self\._(write|write_one|pipelined_write|statement_write|transaction)\(")
    # (Citus's own methods also write shard by shard, or as pipelined statements)
    shards = re.compile(r"self\._(on_shards|read_all)\(")
    for store in (SQLiteStore, PostgresStore, CitusStore):
        unretried = {
            name
            for name in dir(store)
            if not name.startswith("_")
            and inspect.isfunction(method := inspect.getattr_static(store, name))
            and not hasattr(method, "__wrapped__")
            and (
                opens.search(source := inspect.getsource(method))
                or (store is CitusStore and name in vars(store) and shards.search(source))
            )
        }
        assert unretried <= {"acquire_capacity", "release_capacity", "migrate"}, store
