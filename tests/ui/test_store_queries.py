"""The store queries behind the runs list and the workflow page (`search_runs`,
`count_matching`, `run_groups`) on SQLite, PostgreSQL and memory stores alike."""

from __future__ import annotations

import uuid

import pytest

from persistence.stores import NewRun, RunQuery, Store
from persistence.stores.records import in_state

T0 = 1_700_000_000_000


def add(
    store: Store,
    name: str,
    state: str,
    *,
    status: str = "active",
    key: str | None = None,
    at: int = T0,
    version: str = "v1",
) -> str:
    run = NewRun(
        id=str(uuid.uuid4()),
        workflow_name=name,
        workflow_version=version,
        key=key,
        state=state,
        snapshot={"value": state},
        status=status,
    )
    return store.create_run(run, [], at)[0].id


@pytest.fixture
def filled(store: Store) -> dict[str, str]:
    return {
        "a": add(store, "order", "paying.waiting", key="k-1", at=T0),
        "b": add(store, "order", "paying_later", at=T0 + 1000),
        "c": add(store, "order", "shipping.packing,billing.sent", at=T0 + 2000),
        "d": add(store, "order", "done", status="done", at=T0 + 3000, version="v2"),
        "e": add(store, "invoice", "creating.waiting_to_retry", status="error", at=T0 + 4000),
        "f": add(store, "invoice", "100%_sure", at=T0 + 5000),
    }


def ids(store: Store, query: RunQuery, limit: int = 50, offset: int = 0) -> list[str]:
    return [r.id for r in store.search_runs(query, limit, offset)]


def test_search_filters_combine_and_order_newest_first(
    store: Store, filled: dict[str, str]
) -> None:
    f = filled
    assert ids(store, RunQuery()) == [f["f"], f["e"], f["d"], f["c"], f["b"], f["a"]]
    assert ids(store, RunQuery(workflow_name="order", status="active")) == [f["c"], f["b"], f["a"]]
    assert ids(store, RunQuery(key="k-1")) == [f["a"]]
    assert ids(store, RunQuery(created_after=T0 + 1000, created_before=T0 + 3000)) == [
        f["c"],
        f["b"],
    ]
    assert ids(store, RunQuery(), limit=2, offset=1) == [f["e"], f["d"]]


def test_state_filter_matches_a_leaf_or_anything_inside_a_state_but_not_a_longer_name(
    store: Store, filled: dict[str, str]
) -> None:
    f = filled
    # "paying" matches paying.waiting, not the sibling "paying_later"
    assert ids(store, RunQuery(state="paying")) == [f["a"]]
    assert ids(store, RunQuery(state="paying.waiting")) == [f["a"]]
    # either region of a parallel run
    assert ids(store, RunQuery(state="billing")) == [f["c"]]
    assert ids(store, RunQuery(state="shipping.packing")) == [f["c"]]
    # LIKE wildcards in a state name are taken literally
    assert ids(store, RunQuery(state="100%_sure")) == [f["f"]]
    assert ids(store, RunQuery(state="100%")) == []
    assert ids(store, RunQuery(state="pay")) == []


def test_stuck_filter_keeps_active_runs_not_updated_since(
    store: Store, filled: dict[str, str]
) -> None:
    f = filled
    assert ids(store, RunQuery(stuck_before=T0 + 2500)) == [f["c"], f["b"], f["a"]]
    assert ids(store, RunQuery(stuck_before=T0 + 500, workflow_name="order")) == [f["a"]]


def test_a_run_waiting_for_a_later_timer_is_not_stuck_but_one_long_overdue_is(
    store: Store,
) -> None:
    waiting = NewRun(
        id=str(uuid.uuid4()),
        workflow_name="order",
        workflow_version="v1",
        key=None,
        state="retry.wait",
        snapshot={},
        wake_at=T0 + 10_000,
    )
    overdue = NewRun(
        id=str(uuid.uuid4()),
        workflow_name="order",
        workflow_version="v1",
        key=None,
        state="retry.wait",
        snapshot={},
        wake_at=T0 + 10,
    )
    store.create_run(waiting, [], T0)
    store.create_run(overdue, [], T0)
    assert ids(store, RunQuery(stuck_before=T0 + 5000)) == [overdue.id]
    assert sorted(ids(store, RunQuery(stuck_before=T0 + 20_000))) == sorted(
        [waiting.id, overdue.id]
    )


def test_counts_per_status_follow_the_filters(store: Store, filled: dict[str, str]) -> None:
    assert store.count_matching(RunQuery()) == {"active": 4, "done": 1, "error": 1}
    assert store.count_matching(RunQuery(workflow_name="invoice")) == {"active": 1, "error": 1}
    assert store.count_matching(RunQuery(state="nowhere")) == {}


def test_run_groups_by_state_version_and_workflow(store: Store, filled: dict[str, str]) -> None:
    assert store.run_groups("state", "order") == [
        ("done", "done", 1),
        ("paying.waiting", "active", 1),
        ("paying_later", "active", 1),
        ("shipping.packing,billing.sent", "active", 1),
    ]
    assert store.run_groups("workflow_version", "order") == [("v1", "active", 3), ("v2", "done", 1)]
    assert store.run_groups("workflow_name") == [
        ("invoice", "active", 1),
        ("invoice", "error", 1),
        ("order", "active", 3),
        ("order", "done", 1),
    ]


def test_run_groups_refuses_a_column_it_cannot_group_by(store: Store) -> None:
    with pytest.raises(ValueError, match="cannot group runs by 'snapshot; drop'"):
        store.run_groups("snapshot; drop")


def test_in_state_is_what_the_sql_computes() -> None:
    assert in_state("a.b,c", "a") and in_state("a.b,c", "c") and in_state("a.b,c", "a.b")
    assert not in_state("a.b,c", "a.b.c") and not in_state("ab", "a")


def test_a_cancel_the_store_does_itself_is_in_the_journal(store: Store) -> None:
    run_id = add(store, "order", "paying.waiting")
    assert store.cancel_run(run_id, T0 + 10, "from the operator UI") == "cancelled"
    [entry] = store.list_events(run_id)
    assert entry.event == {"type": "statecharts.cancel", "reason": "from the operator UI"}
    assert (entry.state_before, entry.state_after, entry.created_at) == (
        "paying.waiting",
        "paying.waiting",
        T0 + 10,
    )
    assert entry.step == store.get_run(run_id).version
