"""The store contract, run against SQLite (real files), PostgreSQL (real server), PostgreSQL
behind a real PgBouncer in transaction and in session mode, and memory."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from msgspec import structs

from persistence.stores import (
    ConflictError,
    EffectOutcome,
    JournalEntry,
    NewEffect,
    NewRun,
    RunFinishedError,
    RunNotFoundError,
    RunQuery,
    SchemaVersionError,
    StepCommit,
    Store,
)
from persistence.stores.records import BreakerRecord
from persistence.stores.rules import CANCEL_EVENT
from tests.persistence.conftest import POOLED_KINDS, STORE_KINDS, store_url

StoreFactory = Callable[[], Store]  # the conftest fixture: more store objects on one database

T0 = 1_700_000_000_000
SNAPSHOT: dict[str, Any] = {
    "format": 1,
    "machine": "order",
    "value": {"paying": "waiting"},
    "context": {"items": [1, 2.5, None, True], "name": "Zoë ✓", "nested": {"a": {"b": []}}},
    "timers": [{"id": "t1", "event": {"type": "TIMEOUT"}, "due_at": T0 + 5000}],
}


def new_run(
    key: str | None = None, name: str = "order", wake_at: int | None = T0, **kw: Any
) -> NewRun:
    return NewRun(
        id=str(uuid.uuid4()),
        workflow_name=name,
        workflow_version=kw.pop("version", "v1"),
        key=key,
        state="paying.waiting",
        snapshot=SNAPSHOT,
        wake_at=wake_at,
        **kw,
    )


def effects(n: int) -> list[NewEffect]:
    return [NewEffect(i, "run_action", {"type": f"act{i}", "params": {"i": i}}) for i in range(n)]


def step(store: Store, run_id: str, owner: str, version: int, **kw: Any) -> int:
    now = kw.pop("now", T0 + 10)
    commit = StepCommit(
        run_id=run_id,
        owner=owner,
        expected_version=version,
        state=kw.pop("state", "next"),
        snapshot=kw.pop("snapshot", {"value": "next"}),
        status=kw.pop("status", "active"),
        **kw,
    )
    return store.commit_step(commit, now)


def claim_one(store: Store, run_id: str, owner: str = "w1", now: int = T0) -> int:
    """Lease `run_id` for `owner` (it may already hold it from an earlier batch claim)."""
    store.claim_runs(owner, now, 30_000, 100)
    run = store.get_run(run_id)
    assert run.lease_owner == owner, f"run {run_id} was not claimable"
    return run.version


@pytest.fixture(params=STORE_KINDS + POOLED_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    """Each kind of store in turn, PgBouncer's too (`conftest.store_factory`)."""
    return str(request.param)


# -- schema ---------------------------------------------------------------------------------


def test_migrate_is_idempotent_and_check_passes(store: Store) -> None:
    assert store.migrate() == []
    store.check_schema()
    assert store.schema_version() >= 1


def test_unmigrated_database_is_refused_with_upgrade_hint(
    store_kind: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    from persistence.stores import open_store

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    url = store_url(store_kind, request, fresh)
    with pytest.raises(SchemaVersionError, match="db upgrade"):
        open_store(url)
    store = open_store(url, migrate=True)
    store.check_schema()
    store.close()


@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"])
def test_newer_schema_is_refused(store: Store) -> None:
    from persistence import schema

    newer = schema.latest_version(store.dialect) + 1  # type: ignore[attr-defined]
    if store.dialect == "sqlite":  # type: ignore[attr-defined]
        with store._write() as conn:  # type: ignore[attr-defined]
            conn.execute(
                f"INSERT INTO {schema.VERSION_TABLE} (version, name) VALUES (?, 'x')", (newer,)
            )
    else:
        store._rows(  # type: ignore[attr-defined]
            f"INSERT INTO {schema.VERSION_TABLE} (version, name) VALUES (%s, 'x') RETURNING 1",
            (newer,),
        )
    with pytest.raises(SchemaVersionError, match="newer than this code"):
        store.check_schema()
    with pytest.raises(SchemaVersionError, match="newer than this code"):
        store.migrate()


# -- runs -----------------------------------------------------------------------------------


def test_create_and_get_round_trip_the_whole_row(store: Store) -> None:
    spec = new_run(key="order-1", attempt_count=2, last_error="boom")
    record, created = store.create_run(spec, effects(2), T0)
    assert created
    got = store.get_run(spec.id)
    assert got == record
    assert got.snapshot == SNAPSHOT
    assert (got.workflow_name, got.workflow_version, got.key, got.state) == (
        "order",
        "v1",
        "order-1",
        "paying.waiting",
    )
    assert (got.status, got.version, got.attempt_count, got.last_error) == ("active", 1, 2, "boom")
    assert (got.created_at, got.updated_at, got.wake_at) == (T0, T0, T0)
    assert got.completed_at is None and got.failed_at is None and got.lease_owner is None
    fx = store.list_effects(spec.id)
    assert [(e.idempotency_key, e.step, e.effect_index, e.status) for e in fx] == [
        (f"{spec.id}:1:0", 1, 0, "pending"),
        (f"{spec.id}:1:1", 1, 1, "pending"),
    ]
    assert fx[1].payload == {"type": "act1", "params": {"i": 1}}


def test_start_with_same_key_returns_the_existing_active_run(store: Store) -> None:
    first, created = store.create_run(new_run(key="k"), effects(1), T0)
    again, created_again = store.create_run(new_run(key="k"), effects(3), T0 + 1)
    assert created and not created_again
    assert again.id == first.id
    assert len(store.list_effects(first.id)) == 1
    other, created_other = store.create_run(new_run(key="k", name="invoice"), (), T0)
    assert created_other and other.id != first.id
    assert store.find_run("order", "k") == store.get_run(first.id)


def test_key_is_free_again_once_the_run_ended(store: Store) -> None:
    first, _ = store.create_run(new_run(key="k"), (), T0)
    version = claim_one(store, first.id)
    step(store, first.id, "w1", version, status="done", release=True)
    second, created = store.create_run(new_run(key="k"), (), T0 + 100)
    assert created and second.id != first.id
    assert store.find_run("order", "k") is not None
    assert store.find_run("order", "k").id == second.id  # type: ignore[union-attr]


def test_a_failed_run_resumed_takes_its_key_back_unless_another_run_holds_it(
    store: Store,
) -> None:
    first, _ = store.create_run(new_run(key="k"), (), T0)
    failed = step(store, first.id, "w1", claim_one(store, first.id), status="error", release=True)
    second, created = store.create_run(new_run(key="k"), (), T0 + 100)
    assert created and second.id != first.id
    with pytest.raises(ConflictError):  # two active runs with one key: never
        store.resume_run(first.id, failed, SNAPSHOT, "paying.waiting", T0 + 200)
    assert store.get_run(first.id).status == "error"  # nothing of the refused resume stays
    ended = step(
        store, second.id, "w2", claim_one(store, second.id, "w2"), status="done", release=True
    )
    assert ended > 0
    resumed = store.resume_run(first.id, failed, SNAPSHOT, "paying.waiting", T0 + 300)
    assert resumed.status == "active"
    again, created_again = store.create_run(new_run(key="k"), (), T0 + 400)
    assert (again.id, created_again) == (first.id, False)  # the key's active run again
    assert store.find_run("order", "k").id == first.id  # type: ignore[union-attr]


def test_runs_are_read_together_by_id(store: Store) -> None:
    made = [store.create_run(new_run(), (), T0)[0] for _ in range(3)]
    missing = str(uuid.uuid4())
    found = store.get_runs([made[0].id, made[2].id, missing, made[0].id])
    assert found == {made[0].id: store.get_run(made[0].id), made[2].id: store.get_run(made[2].id)}
    assert store.get_runs([]) == {}


def test_concurrent_starts_with_one_key_create_one_run(store_factory: StoreFactory) -> None:
    stores = [store_factory() for _ in range(4)]
    results: list[str] = []
    errors: list[BaseException] = []

    def start(s: Store) -> None:
        try:
            for _ in range(5):
                results.append(s.create_run(new_run(key="same"), effects(1), T0)[0].id)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 20 and len(set(results)) == 1
    assert len(stores[0].list_runs()) == 1


def test_unknown_run_raises_not_found(store: Store) -> None:
    with pytest.raises(RunNotFoundError):
        store.get_run(str(uuid.uuid4()))
    with pytest.raises(RunNotFoundError):
        store.send_event(str(uuid.uuid4()), {"type": "X"}, T0)
    with pytest.raises(RunNotFoundError):
        store.cancel_run(str(uuid.uuid4()), T0)


def test_list_runs_filters_and_orders_newest_first(store: Store) -> None:
    a, _ = store.create_run(new_run(name="a"), (), T0)
    b, _ = store.create_run(new_run(name="b"), (), T0 + 1)
    c, _ = store.create_run(new_run(name="a"), (), T0 + 2)
    step(store, c.id, "w1", claim_one(store, c.id, now=T0 + 5), status="done")
    assert [r.id for r in store.list_runs()] == [c.id, b.id, a.id]
    assert [r.id for r in store.list_runs(workflow_name="a")] == [c.id, a.id]
    assert [r.id for r in store.list_runs(status="active", workflow_name="a")] == [a.id]
    assert [r.id for r in store.list_runs(limit=1, offset=1)] == [b.id]
    assert store.count_runs() == {"active": 2, "done": 1}


def test_runs_are_found_by_key_in_any_status_and_by_id_prefix(store: Store) -> None:
    tail = "-0000-4000-8000-000000000000"
    old, _ = store.create_run(structs.replace(new_run(key="k1"), id="abc12345" + tail), (), T0)
    step(store, old.id, "w1", claim_one(store, old.id), status="done")
    new, _ = store.create_run(structs.replace(new_run(key="k1"), id="abc12399" + tail), (), T0 + 1)
    other, _ = store.create_run(
        structs.replace(new_run(key="k1", name="b"), id="a0c12399" + tail), (), T0 + 2
    )
    by_key = store.search_runs(RunQuery(workflow_name="order", key="k1"))
    assert [(r.id, r.status) for r in by_key] == [(new.id, "active"), (old.id, "done")]
    assert [r.id for r in store.search_runs(RunQuery(id_prefix="abc123"))] == [new.id, old.id]
    assert [r.id for r in store.search_runs(RunQuery(id_prefix="abc1234"))] == [old.id]
    assert [r.id for r in store.search_runs(RunQuery(id_prefix="a0c"))] == [other.id]
    assert store.search_runs(RunQuery(id_prefix="a_c")) == []  # "_" is no LIKE wildcard
    assert store.search_runs(RunQuery(id_prefix="abd")) == []


# -- claims, leases, steps ------------------------------------------------------------------


def test_claim_takes_only_due_runs_and_leases_them(store: Store) -> None:
    due, _ = store.create_run(new_run(wake_at=T0), (), T0)
    later, _ = store.create_run(new_run(wake_at=T0 + 60_000), (), T0)
    idle, _ = store.create_run(new_run(wake_at=None), (), T0)
    claimed = store.claim_runs("w1", T0, 30_000, 10)
    assert [r.id for r in claimed] == [due.id]
    assert claimed[0].lease_owner == "w1" and claimed[0].lease_expires_at == T0 + 30_000
    assert store.claim_runs("w2", T0 + 1000, 30_000, 10) == []  # leased, nothing else due
    assert {r.id for r in store.claim_runs("w2", T0 + 29_999, 30_000, 10)} == set()
    # at T0+60s the later run is due and the first lease has expired: both are taken
    assert {r.id for r in store.claim_runs("w2", T0 + 60_000, 30_000, 10)} == {due.id, later.id}
    assert idle.id not in {r.id for r in store.claim_runs("w3", T0 + 10**9, 30_000, 10)}


def test_expired_lease_is_recovered_and_the_old_owner_is_fenced_off(store: Store) -> None:
    run, _ = store.create_run(new_run(), (), T0)
    version = claim_one(store, run.id, "w1")
    assert store.claim_runs("w2", T0 + 29_999, 30_000, 10) == []
    taken = store.claim_runs("w2", T0 + 30_000, 30_000, 10)
    assert [r.id for r in taken] == [run.id] and taken[0].lease_owner == "w2"
    with pytest.raises(ConflictError):
        step(store, run.id, "w1", version)
    assert store.heartbeat("w1", [run.id], T0 + 30_001, 30_000) == set()
    assert step(store, run.id, "w2", version) == version + 1


def test_claim_limit_and_concurrent_claimers_never_share_a_run(store_factory: StoreFactory) -> None:
    first = store_factory()
    ids = {first.create_run(new_run(wake_at=T0 + i), (), T0)[0].id for i in range(40)}
    assert len(first.claim_runs("probe", T0 + 100, 1, 7)) == 7
    stores = [store_factory() for _ in range(4)]
    got: dict[str, list[str]] = {}

    def claim(owner: str, s: Store) -> None:
        mine = got.setdefault(owner, [])
        while True:
            batch = s.claim_runs(owner, T0 + 1000, 60_000, 3)
            if not batch:
                return
            mine.extend(r.id for r in batch)

    threads = [threading.Thread(target=claim, args=(f"w{i}", s)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    claimed = [run_id for batch in got.values() for run_id in batch]
    assert sorted(claimed) == sorted(ids)  # each run exactly once


def test_version_filter_restricts_claims_and_unknown_versions_are_reported(store: Store) -> None:
    v1, _ = store.create_run(new_run(version="v1"), (), T0)
    v2, _ = store.create_run(new_run(version="v2"), (), T0)
    other, _ = store.create_run(new_run(name="invoice", version="v9"), (), T0)
    ended, _ = store.create_run(new_run(name="invoice", version="v0"), (), T0)
    store.cancel_run(ended.id, T0)  # an ended run of an unknown version is nothing to report
    assert store.claim_runs("w", T0, 1000, 10, versions=[]) == []
    assert [r.id for r in store.claim_runs("w", T0, 1000, 10, versions=[("order", "v2")])] == [
        v2.id
    ]
    assert {
        (c.workflow_name, c.workflow_version, c.runs)
        for c in store.unknown_versions([("order", "v2")])
    } == {("order", "v1", 1), ("invoice", "v9", 1)}
    assert {(c.workflow_name, c.workflow_version) for c in store.unknown_versions([])} == {
        ("order", "v1"),
        ("order", "v2"),
        ("invoice", "v9"),
    }
    assert {r.id for r in store.claim_runs("w", T0, 1000, 10)} == {v1.id, other.id}


def test_commit_step_writes_state_effects_outcomes_and_journal_together(store: Store) -> None:
    run, _ = store.create_run(new_run(), effects(2), T0)
    version = claim_one(store, run.id)
    first_keys = [e.idempotency_key for e in store.list_effects(run.id)]
    new_version = store.commit_step(
        StepCommit(
            run_id=run.id,
            owner="w1",
            expected_version=version,
            state="shipped",
            snapshot={"value": "shipped", "context": {"n": 1}},
            status="active",
            wake_at=T0 + 999,
            attempt_count=1,
            last_error="transient",
            new_effects=effects(1),
            effect_outcomes=[
                EffectOutcome(first_keys[0], "done", {"id": 7}),
                EffectOutcome(first_keys[1], "failed", None, "HTTP 500"),
            ],
            journal=[JournalEntry({"type": "PAID"}, "paying.waiting", "shipped")],
        ),
        T0 + 50,
    )
    assert new_version == version + 1
    got = store.get_run(run.id)
    assert (got.state, got.snapshot, got.version, got.updated_at) == (
        "shipped",
        {"value": "shipped", "context": {"n": 1}},
        new_version,
        T0 + 50,
    )
    assert (got.attempt_count, got.last_error, got.wake_at, got.lease_owner) == (
        1,
        "transient",
        T0 + 999,
        None,
    )
    fx = store.list_effects(run.id)
    assert [(e.step, e.status, e.result, e.error) for e in fx] == [
        (1, "done", {"id": 7}, None),
        (1, "failed", None, "HTTP 500"),
        (new_version, "pending", None, None),
    ]
    assert fx[2].idempotency_key == f"{run.id}:{new_version}:0"
    journal = store.list_events(run.id)
    assert [(j.step, j.event, j.state_before, j.state_after) for j in journal] == [
        (new_version, {"type": "PAID"}, "paying.waiting", "shipped")
    ]
    assert store.list_effects(run.id, status="pending")[0].step == new_version


def test_stale_writer_gets_conflict_and_nothing_is_written(store: Store) -> None:
    run, _ = store.create_run(new_run(), effects(1), T0)
    version = claim_one(store, run.id)
    key = store.list_effects(run.id)[0].idempotency_key
    step(store, run.id, "w1", version, release=False)
    before = store.get_run(run.id)
    with pytest.raises(ConflictError):
        step(
            store,
            run.id,
            "w1",
            version,
            state="stale",
            new_effects=effects(2),
            effect_outcomes=[EffectOutcome(key, "done", 1)],
            journal=[JournalEntry({"type": "X"}, "a", "b")],
        )
    with pytest.raises(ConflictError):
        step(store, run.id, "intruder", version + 1)
    assert store.get_run(run.id) == before
    assert [e.status for e in store.list_effects(run.id)] == ["pending"]
    assert store.list_events(run.id) == []


def test_outcome_for_an_effect_that_is_not_pending_aborts_the_step(store: Store) -> None:
    run, _ = store.create_run(new_run(), effects(1), T0)
    version = claim_one(store, run.id)
    key = store.list_effects(run.id)[0].idempotency_key
    version = step(
        store,
        run.id,
        "w1",
        version,
        release=False,
        effect_outcomes=[EffectOutcome(key, "done", "first")],
    )
    before = store.get_run(run.id)
    with pytest.raises(ConflictError):
        step(store, run.id, "w1", version, effect_outcomes=[EffectOutcome(key, "done", "again")])
    assert store.get_run(run.id) == before
    assert store.list_effects(run.id)[0].result == "first"


def test_release_without_a_next_wake_leaves_the_run_waiting(store: Store) -> None:
    # what a worker does with a claimed run that had nothing to do and no timer: PostgreSQL
    # once refused the untyped NULL ("wake_at is timestamptz but expression is text")
    run, _ = store.create_run(new_run(), (), T0)
    claim_one(store, run.id)
    assert store.release(run.id, "w1", None) is True
    released = store.get_run(run.id)
    assert (released.lease_owner, released.lease_expires_at, released.wake_at) == (None, None, None)
    assert store.claim_runs("w2", T0 + 10**9, 30_000, 10) == []


def test_keeping_the_lease_blocks_others_and_release_sets_the_next_wake(store: Store) -> None:
    run, _ = store.create_run(new_run(), (), T0)
    version = claim_one(store, run.id)
    version = step(store, run.id, "w1", version, release=False, new_effects=effects(1))
    kept = store.get_run(run.id)
    assert kept.lease_owner == "w1" and kept.wake_at == kept.lease_expires_at
    assert store.claim_runs("w2", T0 + 1000, 30_000, 10) == []
    assert store.heartbeat("w1", [run.id, str(uuid.uuid4())], T0 + 20_000, 30_000) == {run.id}
    assert store.claim_runs("w2", T0 + 40_000, 30_000, 10) == []  # heartbeat moved the expiry
    assert store.release(run.id, "w2", T0) is False
    assert store.release(run.id, "w1", T0 + 45_000) is True
    released = store.get_run(run.id)
    assert (released.lease_owner, released.wake_at, released.version) == (
        None,
        T0 + 45_000,
        version,
    )


def test_terminal_step_sets_completion_times(store: Store) -> None:
    ok, _ = store.create_run(new_run(), (), T0)
    bad, _ = store.create_run(new_run(), (), T0)
    step(store, ok.id, "w1", claim_one(store, ok.id), status="done", now=T0 + 7)
    step(
        store,
        bad.id,
        "w1",
        claim_one(store, bad.id),
        status="error",
        last_error="no restore",
        now=T0 + 8,
    )
    done, failed = store.get_run(ok.id), store.get_run(bad.id)
    assert (done.status, done.completed_at, done.failed_at, done.wake_at) == (
        "done",
        T0 + 7,
        None,
        None,
    )
    assert (failed.status, failed.completed_at, failed.failed_at, failed.last_error) == (
        "error",
        T0 + 8,
        T0 + 8,
        "no restore",
    )
    with pytest.raises(ValueError, match="unknown run status"):
        step(store, ok.id, "w1", done.version, status="finished")


# -- inbox and cancel -----------------------------------------------------------------------


def test_sent_events_make_an_idle_run_claimable_and_are_consumed_with_the_step(
    store: Store,
) -> None:
    run, _ = store.create_run(new_run(wake_at=None), (), T0)
    assert store.claim_runs("w1", T0, 1000, 10) == []
    first = store.send_event(run.id, {"type": "PAY", "amount": 3}, T0 + 1)
    second = store.send_event(run.id, {"type": "SHIP"}, T0 + 2)
    assert first < second
    claimed = store.claim_runs("w1", T0 + 3, 1000, 10)
    assert [r.id for r in claimed] == [run.id]
    events = store.pending_events(run.id)
    assert [(e.id, e.event) for e in events] == [
        (first, {"type": "PAY", "amount": 3}),
        (second, {"type": "SHIP"}),
    ]
    assert store.claim_runs("w2", T0 + 4, 1000, 10) == []  # leased despite queued events
    step(store, run.id, "w1", claimed[0].version, consumed_inbox=[first])
    assert [e.id for e in store.pending_events(run.id)] == [second]
    assert [r.id for r in store.claim_runs("w2", T0 + 5, 1000, 10)] == [run.id]


def test_events_to_an_ended_run_are_refused(store: Store) -> None:
    run, _ = store.create_run(new_run(), (), T0)
    step(store, run.id, "w1", claim_one(store, run.id), status="done")
    with pytest.raises(RunFinishedError):
        store.send_event(run.id, {"type": "X"}, T0)


def test_cancel_of_an_unleased_run_ends_it_and_skips_its_effects(store: Store) -> None:
    run, _ = store.create_run(new_run(), effects(2), T0)
    store.send_event(run.id, {"type": "X"}, T0)
    assert store.cancel_run(run.id, T0 + 5, "user asked") == "cancelled"
    got = store.get_run(run.id)
    assert (got.status, got.completed_at, got.last_error, got.wake_at) == (
        "cancelled",
        T0 + 5,
        "user asked",
        None,
    )
    assert [(e.status, e.result) for e in store.list_effects(run.id)] == [
        ("skipped", "cancelled")
    ] * 2
    assert store.pending_events(run.id) == []
    assert store.claim_runs("w1", T0 + 10**9, 1000, 10) == []
    assert store.cancel_run(run.id, T0 + 6) == "finished"


def test_cancel_of_a_leased_run_is_queued_for_the_lease_holder(store: Store) -> None:
    run, _ = store.create_run(new_run(), (), T0)
    version = claim_one(store, run.id)
    assert store.cancel_run(run.id, T0 + 5, "stop") == "requested"
    assert store.get_run(run.id).status == "active"
    assert [e.event for e in store.pending_events(run.id)] == [
        {"type": CANCEL_EVENT, "reason": "stop"}
    ]
    assert step(store, run.id, "w1", version) == version + 1  # holder is not fenced off


# -- reports and helper tables ----------------------------------------------------------------


def test_stuck_runs_are_active_runs_untouched_past_the_threshold(store: Store) -> None:
    old, _ = store.create_run(new_run(wake_at=None), (), T0)
    fresh, _ = store.create_run(new_run(wake_at=None), (), T0 + 50_000)
    ended, _ = store.create_run(new_run(), (), T0)
    step(store, ended.id, "w1", claim_one(store, ended.id), status="done", now=T0)
    assert [r.id for r in store.stuck_runs(T0 + 60_000, 30_000)] == [old.id]
    assert {r.id for r in store.stuck_runs(T0 + 100_000, 30_000)} == {old.id, fresh.id}


def test_a_run_asleep_until_a_later_timer_is_not_stuck_until_the_timer_is_overdue(
    store: Store,
) -> None:
    asleep, _ = store.create_run(new_run(wake_at=T0 + 86_400_000), (), T0)
    assert store.stuck_runs(T0 + 3_600_000, 60_000) == []
    overdue = T0 + 86_400_000 + 60_001  # nobody woke it when the timer came due
    assert [r.id for r in store.stuck_runs(overdue, 60_000)] == [asleep.id]


def test_one_at_a_time_claim_with_staleness_window(store_factory: StoreFactory) -> None:
    a, b = store_factory(), store_factory()
    assert a.try_claim("nightly", "A", T0, 10_000)
    assert not b.try_claim("nightly", "B", T0 + 5_000, 10_000)
    assert a.try_claim("nightly", "A", T0 + 6_000, 10_000)  # refresh
    assert not b.try_claim("nightly", "B", T0 + 15_000, 10_000)
    assert b.try_claim("nightly", "B", T0 + 16_000, 10_000)  # stale: taken over
    claim = a.get_claim("nightly")
    assert claim is not None and (claim.owner, claim.expires_at) == ("B", T0 + 26_000)
    assert not a.release_claim("nightly", "A")
    assert b.release_claim("nightly", "B")
    assert a.get_claim("nightly") is None and a.try_claim("nightly", "A", T0 + 17_000, 10)


def test_breaker_state_is_compare_and_set(store_factory: StoreFactory) -> None:
    a, b = store_factory(), store_factory()
    assert a.get_breaker("payments") is None
    assert a.put_breaker(BreakerRecord("payments", "closed", 1), 0, T0)
    assert not b.put_breaker(BreakerRecord("payments", "closed", 1), 0, T0)
    seen = b.get_breaker("payments")
    assert seen is not None and (seen.state, seen.failure_count, seen.version) == ("closed", 1, 1)
    opened = BreakerRecord("payments", "open", 5, opened_at=T0 + 9, data={"probe": None})
    assert b.put_breaker(opened, seen.version, T0 + 9)
    assert not a.put_breaker(BreakerRecord("payments", "closed", 0), 1, T0 + 10)
    final = a.get_breaker("payments")
    assert final is not None
    assert (final.state, final.failure_count, final.opened_at, final.data, final.version) == (
        "open",
        5,
        T0 + 9,
        {"probe": None},
        2,
    )


def test_scheduled_start_fires_once_per_slot_across_racing_stores(
    store_factory: StoreFactory,
) -> None:
    stores = [store_factory() for _ in range(3)]
    started: list[str] = []
    lock = threading.Lock()

    def fire(s: Store) -> None:
        # every racer saw "never fired" and tries to fire the same slot
        record = s.fire_schedule("nightly", 0, T0, new_run(), effects(1), T0)
        if record is not None:
            with lock:
                started.append(record.id)

    threads = [threading.Thread(target=fire, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(started) == 1
    schedule = stores[0].get_schedule("nightly")
    assert schedule is not None and (schedule.last_fire_at, schedule.version) == (T0, 1)
    assert len(stores[0].list_runs()) == 1 and len(stores[0].list_effects(started[0])) == 1
    assert stores[0].fire_schedule("nightly", 0, T0 + 1, new_run(), (), T0) is None
    assert stores[0].fire_schedule("nightly", 1, T0 + 1, new_run(), (), T0) is not None


def test_a_kept_lease_is_renewed_by_each_step(store: Store) -> None:
    run, _ = store.create_run(new_run(), (), T0)
    version = claim_one(store, run.id)
    step(store, run.id, "w1", version, release=False, lease_until=T0 + 90_000)
    kept = store.get_run(run.id)
    assert (kept.lease_owner, kept.lease_expires_at, kept.wake_at) == (
        "w1",
        T0 + 90_000,
        T0 + 90_000,
    )
    assert store.claim_runs("w2", T0 + 60_000, 30_000, 10) == []
    assert [r.id for r in store.claim_runs("w2", T0 + 90_000, 30_000, 10)] == [run.id]


def test_pending_work_is_pending_effects_and_queued_events(store: Store) -> None:
    run, _ = store.create_run(new_run(), effects(2), T0)
    version = claim_one(store, run.id)
    first = store.list_effects(run.id)[0].idempotency_key
    step(
        store,
        run.id,
        "w1",
        version,
        release=False,
        effect_outcomes=[EffectOutcome(first, "done", None)],
    )
    inbox_id = store.send_event(run.id, {"type": "GO"}, T0)
    idle, _ = store.create_run(new_run(), (), T0)
    work = store.pending_work([run.id, idle.id])
    assert set(work) == {run.id, idle.id}
    assert [e.effect_index for e in work[run.id].effects] == [1]
    assert [(e.id, e.event) for e in work[run.id].inbox] == [(inbox_id, {"type": "GO"})]
    assert (work[idle.id].effects, work[idle.id].inbox) == ([], [])


def test_a_claim_with_work_reads_what_pending_work_reads(store: Store) -> None:
    """`claim_work` (one round trip on PostgreSQL) leases as `claim_runs` does and returns each
    run's pending effects and live events exactly as `pending_work` reads them afterwards."""
    busy, _ = store.create_run(new_run(), effects(3), T0)
    store.send_event(busy.id, {"type": "GO", "n": [1, {"x": None}]}, T0 + 1, traceparent="tp")
    store.send_event(busy.id, {"type": "AGAIN"}, T0 + 2)
    quiet, _ = store.create_run(new_run(wake_at=None), (), T0)  # claimed for its event
    store.send_event(quiet.id, {"type": "ONLY"}, T0 + 3)
    idle, _ = store.create_run(new_run(wake_at=None), (), T0)  # nothing to do: not claimed
    claimed = store.claim_work("w1", T0 + 10, 30_000, 10)
    by_id = {run.id: work for run, work in claimed}
    assert set(by_id) == {busy.id, quiet.id} and idle.id not in by_id
    assert all(run.lease_owner == "w1" for run, _ in claimed)
    assert by_id == store.pending_work([busy.id, quiet.id])
    assert [e.effect_index for e in by_id[busy.id].effects] == [0, 1, 2]
    assert [(i.event["type"], i.traceparent, i.created_at) for i in by_id[busy.id].inbox] == [
        ("GO", "tp", T0 + 1),
        ("AGAIN", None, T0 + 2),
    ]
    assert store.claim_work("w2", T0 + 20, 30_000, 10) == []  # leased: no one else takes them


def test_a_step_can_start_runs_in_its_own_transaction(store: Store) -> None:
    failed, _ = store.create_run(new_run(), (), T0)
    version = claim_one(store, failed.id)
    handler = new_run(key=f"error-of:{failed.id}", name="on_error")
    with pytest.raises(ConflictError):
        step(
            store, failed.id, "w1", version + 5, status="error", start_runs=[(handler, effects(1))]
        )
    assert store.find_run("on_error", f"error-of:{failed.id}") is None
    step(store, failed.id, "w1", version, status="error", start_runs=[(handler, effects(1))])
    started = store.get_run(handler.id)
    assert (started.workflow_name, started.key, started.version) == (
        "on_error",
        f"error-of:{failed.id}",
        1,
    )
    assert [e.idempotency_key for e in store.list_effects(handler.id)] == [f"{handler.id}:1:0"]
    assert store.get_run(failed.id).status == "error"


# -- batches of steps -----------------------------------------------------------------------


def commit(run_id: str, version: int, owner: str = "w1", **kw: Any) -> StepCommit:
    return StepCommit(
        run_id=run_id,
        owner=owner,
        expected_version=version,
        state=kw.pop("state", "next"),
        snapshot=kw.pop("snapshot", {"value": "next"}),
        status=kw.pop("status", "active"),
        **kw,
    )


def test_a_batch_writes_each_step_with_its_own_rows(store: Store) -> None:
    runs = [store.create_run(new_run(), effects(1), T0)[0] for _ in range(3)]
    store.claim_runs("w1", T0, 30_000, 10)
    keys = {r.id: store.list_effects(r.id)[0].idempotency_key for r in runs}
    inbox_id = store.send_event(runs[2].id, {"type": "GO"}, T0)
    batch = [
        commit(
            runs[0].id,
            1,
            state="a",
            release=False,
            lease_until=T0 + 40_000,
            effect_outcomes=[EffectOutcome(keys[runs[0].id], "done", {"n": 0})],
            new_effects=effects(2),
            journal=[JournalEntry({"type": "A"}, "s", "a")],
        ),
        commit(
            runs[1].id,
            1,
            state="b",
            status="done",
            effect_outcomes=[EffectOutcome(keys[runs[1].id], "failed", None, "boom")],
            journal=[
                JournalEntry({"type": "B1"}, "s", "m"),
                JournalEntry({"type": "B2"}, "m", "b"),
            ],
        ),
        commit(runs[2].id, 1, state="c", wake_at=T0 + 5_000, consumed_inbox=[inbox_id]),
    ]
    assert store.commit_steps(batch, T0 + 20) == [2, 2, 2]
    first, second, third = (store.get_run(r.id) for r in runs)
    assert (first.state, first.lease_owner, first.lease_expires_at, first.wake_at) == (
        "a",
        "w1",
        T0 + 40_000,
        T0 + 40_000,
    )
    assert (second.state, second.status, second.completed_at, second.lease_owner) == (
        "b",
        "done",
        T0 + 20,
        None,
    )
    assert (third.state, third.wake_at, third.lease_owner) == ("c", T0 + 5_000, None)
    assert [(e.step, e.effect_index, e.status) for e in store.list_effects(runs[0].id)] == [
        (1, 0, "done"),
        (2, 0, "pending"),
        (2, 1, "pending"),
    ]
    assert [(e.status, e.error) for e in store.list_effects(runs[1].id)] == [("failed", "boom")]
    assert [j.event["type"] for j in store.list_events(runs[1].id)] == ["B1", "B2"]
    assert [j.event["type"] for j in store.list_events(runs[0].id)] == ["A"]
    assert store.pending_events(runs[2].id) == []


def test_a_failed_runs_traceback_is_kept_beside_its_error_in_a_batch_alone_and_by_fail_run(
    store: Store,
) -> None:
    """Issue 44 item 8: the traceback of the code that failed a run is written with its
    `last_error`, by a batch of steps, a step alone and `fail_run`, and read back by the run's
    view; a step that fails nothing leaves it as it was."""
    runs = [store.create_run(new_run(), [], T0)[0] for _ in range(4)]
    store.claim_runs("w1", T0, 30_000, 10)
    trace = "Traceback (most recent call last):\n  File \"shop.py\", line 3\nKeyError: 'ü'"
    failing = {"status": "error", "last_error": "KeyError: 'ü'", "error_traceback": trace}
    assert store.commit_steps(
        [commit(runs[0].id, 1, **failing), commit(runs[1].id, 1, state="b", release=False)], T0 + 20
    ) == [2, 2]
    assert store.commit_step(commit(runs[2].id, 1, **failing), T0 + 20) == 2
    assert store.fail_run(
        runs[3].id, "w1", "the store refused its step", T0 + 20, error_traceback=trace
    )
    assert [store.error_traceback(r.id) for r in runs] == [trace, None, trace, trace]
    assert store.get_run(runs[0].id).last_error == "KeyError: 'ü'"
    assert step(store, runs[1].id, "w1", 2) == 3
    assert store.error_traceback(runs[1].id) is None
    assert store.error_traceback(str(uuid.uuid4())) is None


def test_a_stale_step_in_a_batch_writes_nothing_and_the_others_commit(store: Store) -> None:
    ok, _ = store.create_run(new_run(), effects(1), T0)
    stale, _ = store.create_run(new_run(), effects(1), T0)
    taken, _ = store.create_run(new_run(), effects(1), T0)
    store.claim_runs("w1", T0, 30_000, 10)
    store.claim_runs("w2", T0 + 60_000, 30_000, 10)  # w1's leases expired: w2 holds all three
    store.claim_runs("w1", T0 + 120_000, 30_000, 10)  # and w1 takes them back
    store.release(taken.id, "w1", T0)
    store.claim_runs("w3", T0 + 120_001, 30_000, 10)  # `taken` now belongs to w3
    before = store.get_run(stale.id)
    key = {r.id: store.list_effects(r.id)[0].idempotency_key for r in (ok, stale, taken)}
    batch = [
        commit(
            r.id,
            store.get_run(r.id).version + (5 if r is stale else 0),
            effect_outcomes=[EffectOutcome(key[r.id], "done", 1)],
            new_effects=effects(1),
            journal=[JournalEntry({"type": "X"}, "a", "b")],
        )
        for r in (ok, stale, taken)
    ]
    versions = store.commit_steps(batch, T0 + 120_010)
    assert versions[0] == store.get_run(ok.id).version and versions[1:] == [None, None]
    assert store.get_run(stale.id) == before
    for lost in (stale, taken):
        assert [e.status for e in store.list_effects(lost.id)] == ["pending"]
        assert store.list_events(lost.id) == []
    assert [e.status for e in store.list_effects(ok.id)] == ["done", "pending"]


def test_a_batch_takes_one_commit_per_run(store: Store) -> None:
    run, _ = store.create_run(new_run(), (), T0)
    version = claim_one(store, run.id)
    with pytest.raises(ValueError, match="one commit per run"):
        store.commit_steps([commit(run.id, version), commit(run.id, version + 1)], T0 + 1)
    assert store.get_run(run.id).version == version
    assert store.commit_steps([], T0) == []


def test_journal_and_outbox_listings_can_take_only_the_newest(store: Store) -> None:
    run, _ = store.create_run(new_run(), (), T0)
    version = claim_one(store, run.id)
    for n in range(5):
        version = step(
            store,
            run.id,
            "w1",
            version,
            release=False,
            new_effects=effects(2),
            journal=[JournalEntry({"type": f"E{n}"}, "a", "b")],
        )
    assert store.count_events(run.id) == 5
    assert [j.event["type"] for j in store.list_events(run.id, last=2)] == ["E3", "E4"]
    assert [j.event["type"] for j in store.list_events(run.id, last=9)] == [
        f"E{n}" for n in range(5)
    ]
    assert store.list_events(run.id, last=0) == []
    newest = store.list_effects(run.id, last=3)
    assert [(e.step, e.effect_index) for e in newest] == [
        (version - 1, 1),
        (version, 0),
        (version, 1),
    ]
    assert newest == store.list_effects(run.id)[-3:]
    with pytest.raises(ValueError, match="last must be at least 0"):
        store.list_events(run.id, last=-1)


def test_a_heartbeat_does_not_wait_for_a_row_its_owner_is_committing(
    pg_dsn: str, pg_schema: str
) -> None:
    """PostgreSQL (row locks; SQLite has one writer): a heartbeat meeting a row locked by an
    in-flight step commit skips it (the commit writes its own lease) and counts it kept;
    waiting could deadlock with a batch commit locking the same rows in another order."""
    import psycopg

    from persistence.stores.postgres import PostgresStore

    store = PostgresStore(pg_dsn, schema=pg_schema, max_size=2)
    try:
        store.migrate()
        locked, other = (store.create_run(new_run(), (), T0)[0] for _ in range(2))
        claim_one(store, locked.id)
        result: list[set[str]] = []
        with psycopg.connect(pg_dsn) as holder:
            holder.execute(f'SET search_path TO "{pg_schema}"')
            holder.execute("SELECT 1 FROM workflow_runs WHERE id = %s FOR UPDATE", (locked.id,))
            beat = threading.Thread(
                target=lambda: result.append(
                    store.heartbeat("w1", [locked.id, other.id], T0 + 20_000, 30_000)
                )
            )
            beat.start()
            beat.join(10)
            waited = beat.is_alive()
            holder.rollback()
        beat.join()
        assert not waited, "the heartbeat waited for the locked row"
        assert result == [{locked.id, other.id}]
        assert store.get_run(other.id).lease_expires_at == T0 + 50_000
        assert store.get_run(locked.id).lease_expires_at == T0 + 30_000  # left to its commit
    finally:
        store.close()


def test_the_sweep_turns_only_ended_runs_live_events_into_dead_letters(store: Store) -> None:
    """A live event on an ended run (the step that ends a run dead-letters what is queued, so
    only a row written otherwise: an older version, a hand-made fix) is made a dead letter by
    a worker's periodic sweep, naming how the run ended; an active run's events stay live."""
    ended, _ = store.create_run(new_run(), (), T0)
    waiting, _ = store.create_run(new_run(), (), T0)
    version = claim_one(store, ended.id)
    late = store.send_event(ended.id, {"type": "LATE"}, T0 + 5)
    queued = store.send_event(waiting.id, {"type": "NEXT"}, T0 + 5)
    step(store, ended.id, "w1", version, state="done", status="done")
    store._write_one(  # type: ignore[attr-defined]  (the live row, as written otherwise)
        "UPDATE workflow_inbox SET dead_at = NULL, dead_reason = NULL WHERE id = ? RETURNING id",
        (late,),
    )
    dead = store.sweep_dead_letters(T0 + 20)
    assert [(d.id, d.run_id, d.event["type"]) for d in dead] == [(late, ended.id, "LATE")]
    assert "done" in (dead[0].reason or "")
    assert [e.id for e in store.pending_work([waiting.id])[waiting.id].inbox] == [queued]
    assert store.sweep_dead_letters(T0 + 30) == []
