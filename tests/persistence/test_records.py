"""The store's records are frozen values: a run's row compares by its columns, not by how it
was claimed, and none of them can be changed in place (they are msgspec structs, built in C on
the hot path, no longer dataclasses)."""

from __future__ import annotations

import pytest
from msgspec import structs

from persistence.stores.errors import StoreEncodingError
from persistence.stores.records import (
    MAX_STORED_KEY_BYTES,
    CallEnd,
    NewRun,
    RunRecord,
    StepCommit,
)


def _run(**changes: object) -> RunRecord:
    row = RunRecord(
        "8d3e6f4a-0000-4000-8000-000000000001",
        "invoice",
        "v1",
        None,
        "waiting",
        {"value": "waiting"},
        "active",
        0,
        1_000,
        2_000,
        None,
        None,
        None,
        None,
        None,
        None,
        3,
    )
    return structs.replace(row, **changes)


def test_a_run_row_is_equal_to_the_same_row_claimed_from_another_owner() -> None:
    claimed = _run(previous_owner="worker-a", due_at=1_500)
    assert claimed == _run()
    assert (claimed != _run()) is False  # (`!=` agrees with `==`)


def test_a_run_row_differs_by_any_column() -> None:
    assert _run(state="done") != _run()
    assert (_run(version=4) == _run()) is False
    assert _run() != "not a run"


def test_records_cannot_be_changed_in_place() -> None:
    commit = StepCommit("r", "owner", 3, "done", {}, "done")
    for record, name in ((_run(), "state"), (commit, "status"), (CallEnd("done"), "outcome")):
        with pytest.raises(AttributeError):
            setattr(record, name, "changed")


def test_a_new_run_with_a_key_no_store_holds_is_refused_where_it_is_made() -> None:
    with pytest.raises(StoreEncodingError, match="run key"):  # (its __post_init__ still runs)
        NewRun("r", "invoice", "v1", "k" * (MAX_STORED_KEY_BYTES + 1), "waiting", {})
