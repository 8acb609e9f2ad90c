"""Load control on real worker subprocesses, on SQLite and PostgreSQL: a concurrency limit is
never exceeded across workers, a rate limit holds over a window, a Retry-After pauses the
downstream for every run, priorities order claims, and a run waiting for capacity survives a
SIGKILL of its worker and keeps its place. The fake downstream (`tests.persistence.limited`)
measures what it saw: when each call started and ended.
"""

from __future__ import annotations

import signal
import sqlite3
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from persistence import schema
from persistence.capacity import Limit
from persistence.runtime import Runtime
from persistence.stores import NewRun, Store, open_store
from persistence.stores.capacity import CAPACITY
from persistence.stores.rules import MAX_PRIORITY, PRIORITY_AGING_MS
from statecharts import Machine, create_machine
from statecharts.errors import MachineDefinitionError
from tests.persistence import faulty, limited, test_fault_injection
from tests.persistence.test_fault_injection import (
    Env,
    Worker,
    ended,
    stop_cleanly,
    wait_until,
    workers,
)

e = test_fault_injection.e  # the fixture: a SQLite file, then a PostgreSQL schema, with a ledger

LIMITED = ("--limits", "tests.persistence.limited")


def fleet(e: Env, count: int, threads: int = 2, *more: str) -> AbstractContextManager[list[Worker]]:
    """`count` workers on the limited workflows and their limits."""
    return workers(
        e, count, threads, machines="tests.persistence.limited", options=(*LIMITED, *more)
    )


def runtime(e: Env) -> Runtime:
    return Runtime(
        e.store, limited.MACHINES, limits=limited.LIMITS, workflow_limits=limited.WORKFLOW_LIMITS
    )


def waiting_for(e: Env, ids: list[str]) -> set[str | None]:
    return {waits(e.store, i) for i in ids}


def waits(store: Store, run_id: str) -> str | None:
    """What the run, or a call of it (a limited call waits beside its run), waits for."""
    called = [c.waiting_for for c in store.list_calls(run_id) if c.waiting_for]
    return called[0] if called else store.get_run(run_id).waiting_for


def paused(e: Env, name: str) -> bool:
    """Whether a Retry-After pause of limit `name` is stored."""
    now = int(time.time() * 1000)
    return any(u.name == name and u.paused_until is not None for u in e.store.capacity_usage(now))


def test_a_limit_of_n_is_never_exceeded_across_three_workers(e: Env) -> None:
    rt = runtime(e)
    ids = [rt.start("crm_sync", {"name": "crm", "ms": 150}) for _ in range(18)]
    seen: set[str | None] = set()
    with fleet(e, 3) as running:
        deadline = time.monotonic() + 60
        while not ended(e.store, ids)() and time.monotonic() < deadline:
            seen |= waiting_for(e, ids)
            time.sleep(0.05)
        stop_cleanly(running)
    assert ended(e.store, ids)()
    assert f"{CAPACITY}: crm" in seen  # visible on the rows while they waited
    assert limited.max_in_flight("crm") == 3  # the downstream never saw a fourth call
    for run_id in ids:
        run = e.store.get_run(run_id)
        assert (run.status, run.waiting_for) == ("done", None)
        assert faulty.calls("crm", run_id) == 1
    assert e.store.capacity_usage(rt.clock.now())[0].in_flight == 0  # every slot came back


def test_a_rate_limit_holds_over_a_window(e: Env) -> None:
    rt = runtime(e)
    ids = [rt.start("rated", {"name": "api"}) for _ in range(12)]
    with fleet(e, 2) as running:
        wait_until(ended(e.store, ids), "every rated run ended")
        stop_cleanly(running)
    starts = [s for _, s, _ in limited.intervals("api")]
    assert len(starts) == 12 and all(e.store.get_run(i).status == "done" for i in ids)
    # 4 calls per 2000 ms, as the downstream saw them (0.3 s for the hop from grant to call: a
    # loaded machine delays some calls' threads more than others)
    assert limited.most_started_within("api", 1.7) <= 4
    assert max(starts) - min(starts) >= 3.9  # 12 calls: three windows' worth


def test_a_retry_after_pauses_the_downstream_for_all_runs(e: Env) -> None:
    rt = runtime(e)
    faulty.set_switch("throttle", True)
    with fleet(e, 2) as running:
        first = rt.start("paid", {"name": "pay", "throttle": True})
        wait_until(lambda: faulty.calls("pay", first) == 1, "the first call was answered 429")
        # the ledger has the call as it starts; the pause is stored when its step commits, and
        # a run started before that may call meanwhile (seen on a loaded machine): wait for it
        wait_until(lambda: paused(e, "pay"), "the Retry-After pause is stored")
        told_at = limited.intervals("pay")[0][1]
        others = [rt.start("paid", {"name": "pay"}) for _ in range(5)]
        wait_until(
            lambda: "paused by Retry-After: pay" in waiting_for(e, others),
            "the other runs wait for the pause",
        )
        wait_until(ended(e.store, [first, *others]), "every run ended")
        stop_cleanly(running)
    later = [s for k, s, _ in limited.intervals("pay")[1:]]
    assert len(later) == 6  # the throttled run's retry and the five others
    assert min(later) >= told_at + limited.RETRY_AFTER_MS / 1000 - 0.01
    assert all(e.store.get_run(i).status == "done" for i in [first, *others])


def test_priorities_order_claims(e: Env) -> None:
    """One slot, so the downstream's start order is the grant order (calls granted together
    in one look would start on threads of their own, in an order nobody sets)."""
    rt = runtime(e)
    low = [rt.start("single", {"name": "prio"}, priority=0) for _ in range(6)]
    high = [rt.start("single", {"name": "prio"}, priority=3) for _ in range(6)]
    with fleet(e, 1, 1, "--batch", "1") as running:
        wait_until(ended(e.store, low + high), "every run ended")
        stop_cleanly(running)
    order = [run for run, _, _ in limited.intervals("prio")]
    assert set(order[:6]) == set(high) and set(order[6:]) == set(low)


def test_a_waiting_run_survives_sigkill_of_its_worker_and_keeps_its_place(e: Env) -> None:
    rt = runtime(e)
    holder = rt.start("single", {"name": "one", "ms": 1500})
    with fleet(e, 1, 2) as first:
        wait_until(lambda: faulty.calls("one", holder) == 1, "the first call is in flight")
        queue = []
        for _ in range(3):  # one by one, so that their places are known
            queue.append(rt.start("single", {"name": "one", "ms": 200}))
            wait_until(
                lambda: waits(e.store, queue[-1]) is not None, "the run's call waits for capacity"
            )
        first[0].process.send_signal(signal.SIGKILL)
        first[0].process.wait(timeout=10)
        killed_at = time.time()
    for run_id in queue:
        run = e.store.get_run(run_id)
        assert (run.status, waits(e.store, run_id)) == ("active", f"{CAPACITY}: one")
    with fleet(e, 2) as second:
        wait_until(ended(e.store, [holder, *queue]), "every run ended after the kill")
        stop_cleanly(second)
    calls = limited.intervals("one", killed_at)
    order = [run for run, _, _ in calls]
    assert order == [holder, holder, *queue]  # the holder's call again (its slot came back)
    assert limited.max_in_flight("one", killed_at) == 1
    assert all(e.store.get_run(i).status == "done" for i in [holder, *queue])


# -- the store's rules, in process, on every store -------------------------------------------


def _run(store: Store, now: int, priority: int = 0, wake_at: int | None = None) -> str:
    run_id = str(uuid.uuid4())
    store.create_run(
        NewRun(
            run_id,
            "w",
            "v",
            None,
            "s",
            {},
            wake_at=now if wake_at is None else wake_at,
            priority=priority,
        ),
        [],
        now,
    )
    return run_id


def test_claims_age_so_a_long_due_low_priority_run_goes_first(store: Store) -> None:
    if store.url.startswith("citus"):
        pytest.skip("on Citus a claim takes runs in this order within a shard (docs/citus.md)")
    now = 10 * 60 * PRIORITY_AGING_MS
    fresh_high = _run(store, now, priority=2)  # ordered as if due 2 minutes ago
    old_low = _run(store, now, wake_at=now - 3 * PRIORITY_AGING_MS)  # due 3 minutes ago
    recent_low = _run(store, now, wake_at=now - PRIORITY_AGING_MS)
    later_high = _run(store, now, priority=9, wake_at=now + 1)  # not due yet: never claimed
    claimed = [store.claim_runs("w", now, 1000, 1)[0].id for _ in range(3)]
    assert claimed == [old_low, fresh_high, recent_low]
    assert store.claim_runs("w", now, 1000, 10) == []
    assert store.get_run(later_high).priority == 9


def _lease(store: Store, run_id: str, now: int, priority: int = 0) -> str:
    owner = f"o-{run_id[:4]}"
    store.create_run(
        NewRun(run_id, "w", "v", None, "s", {}, wake_at=now, priority=priority), [], now
    )
    assert run_id in {r.id for r in store.claim_runs(owner, now, 1000, 10)}
    return owner


def test_a_freed_slot_goes_to_the_first_waiting_run_not_a_newcomer(store: Store) -> None:
    now, args = (
        1_000_000,
        {"max_in_flight": 1, "calls": None, "per_ms": 1000, "recheck_ms": 30_000, "lease_ms": 1000},
    )
    a, b, c = (str(uuid.uuid4()) for _ in range(3))
    owner_a, owner_b, owner_c = (_lease(store, run, now) for run in (a, b, c))
    assert store.acquire_capacity("x", "call-a", a, owner_a, now, **args).granted
    refused = store.acquire_capacity("x", "call-b", b, owner_b, now + 1, **args)
    assert not refused.granted and refused.reason == f"{CAPACITY}: x"
    row = store.get_run(b)
    assert (row.lease_owner, row.waiting_for, row.wake_at) == (
        None,
        f"{CAPACITY}: x",
        now + 1 + 30_000,
    )
    store.release_capacity("x", ["call-a"], now + 2, max_in_flight=1, lease_ms=1000)
    woken = store.get_run(b).wake_at  # at once, and before any other due run
    assert woken is not None and woken <= now + 2 - MAX_PRIORITY * PRIORITY_AGING_MS
    assert not store.acquire_capacity("x", "call-c", c, owner_c, now + 3, **args).granted
    owner_b = "o-again"
    assert [r.id for r in store.claim_runs(owner_b, now + 4, 1000, 10)] == [b]
    assert store.acquire_capacity("x", "call-b", b, owner_b, now + 4, **args).granted
    assert store.get_run(b).waiting_for is None


def _a_holds_b_waits(store: Store, recheck_ms: int) -> tuple[int, dict[str, Any], str, str]:
    """Run `a`'s call `call-a` holds the one slot of limit `x` (taken at `now`), run `b`'s
    `call-b` waits for it (refused at `now + 1`): `now`, the limit's arguments, `a` and `b`."""
    now = 1_000_000
    args: dict[str, Any] = {
        "max_in_flight": 1,
        "calls": None,
        "per_ms": 1000,
        "recheck_ms": recheck_ms,
        "lease_ms": 1000,
    }
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    owner_a, owner_b = _lease(store, a, now), _lease(store, b, now)
    assert store.acquire_capacity("x", "call-a", a, owner_a, now, **args).granted
    assert not store.acquire_capacity("x", "call-b", b, owner_b, now + 1, **args).granted
    return now, args, a, b


def _handed_on(store: Store) -> Callable[[], None]:
    """`_a_holds_b_waits`; the release of `a`'s slot (which reserves it for `b` and wakes `b`),
    to call."""
    now, _, _, _ = _a_holds_b_waits(store, 30_000)
    return lambda: store.release_capacity("x", ["call-a"], now + 2, max_in_flight=1, lease_ms=1000)


@pytest.mark.parametrize("store_kind", ["sqlite", "memory"])
def test_a_slot_handed_to_a_waiting_holder_wakes_this_processs_idle_workers(store: Store) -> None:
    """Once committed: a worker or call executor waiting for work here claims the woken holder
    now, not at its next poll (a limited workflow's backlog drained a slot per poll)."""
    release = _handed_on(store)
    seen = store.wakeup().seen()
    release()
    assert store.wakeup().seen() == seen + 1
    # a release that hands nothing on (nobody waits) wakes nobody
    store.release_capacity("x", [], 1_000_003, max_in_flight=1, lease_ms=1000)
    assert store.wakeup().seen() == seen + 1


@pytest.mark.parametrize("store_kind", ["postgres"])
def test_a_slot_handed_to_a_waiting_holder_wakes_other_processes(
    store: Store, pg_dsn: str, pg_schema: str
) -> None:
    """Workers and executors elsewhere LISTEN: the release's transaction sends them a wake-up."""
    release = _handed_on(store)
    channel = f"statecharts_wake_{pg_schema}"[:63]
    with psycopg.connect(pg_dsn, autocommit=True) as listener:
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        release()
        heard = list(listener.notifies(timeout=10, stop_after=1))
    assert [n.channel for n in heard] == [channel]


def test_the_queue_is_in_claim_order_a_higher_priority_waiter_goes_first(store: Store) -> None:
    now, args = (
        1_000_000,
        {
            "max_in_flight": 1,
            "calls": None,
            "per_ms": 1000,
            "recheck_ms": 600_000,
            "lease_ms": 1000,
        },
    )
    a, low, high, late = (str(uuid.uuid4()) for _ in range(4))
    owner_a, owner_low = _lease(store, a, now), _lease(store, low, now)
    owner_high, owner_late = _lease(store, high, now, priority=2), _lease(store, late, now)
    assert store.acquire_capacity("x", "call-a", a, owner_a, now, **args).granted
    for run, owner, at in ((low, owner_low, now), (high, owner_high, now + 1000)):
        assert not store.acquire_capacity("x", f"call-{run}", run, owner, at, **args).granted
    # a backfill's call asks 3 minutes later: a priority-2 call asking now is ahead of it
    at = now + 3 * PRIORITY_AGING_MS
    assert not store.acquire_capacity("x", "call-late", late, owner_late, at, **args).granted
    store.release_capacity("x", ["call-a"], at + 1, max_in_flight=1, lease_ms=1000)
    waiters = {low: "low", high: "high", late: "late"}  # (a's own run is due again: not one)
    woken = [waiters[r.id] for r in store.claim_runs("o-next", at + 2, 1000, 10) if r.id in waiters]
    assert woken == ["high"]
    store.release_capacity("x", [f"call-{high}"], at + 3, max_in_flight=1, lease_ms=1000)
    woken = [waiters[r.id] for r in store.claim_runs("o-next", at + 4, 1000, 10) if r.id in waiters]
    assert woken == ["low"]


def test_a_head_leased_elsewhere_gets_a_reservation_not_a_second_lease(store: Store) -> None:
    now, args, _, b = _a_holds_b_waits(store, 100)
    # b looks again on its own (its recheck) and another worker holds it as a's call ends
    assert [r.id for r in store.claim_runs("o-recheck", now + 101, 1000, 10)] == [b]
    store.release_capacity("x", ["call-a"], now + 102, max_in_flight=1, lease_ms=1000)
    assert store.get_run(b).lease_owner == "o-recheck"
    assert store.acquire_capacity("x", "call-b", b, "o-recheck", now + 103, **args).granted


def test_a_dead_holders_slot_comes_back_when_its_lease_expires(store: Store) -> None:
    now, args = (
        1_000_000,
        {"max_in_flight": 1, "calls": None, "per_ms": 1000, "recheck_ms": 30_000, "lease_ms": 1000},
    )
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    owner_a, owner_b = _lease(store, a, now), _lease(store, b, now)
    assert store.acquire_capacity("x", "call-a", a, owner_a, now, **args).granted
    assert store.capacity_usage(now)[0].in_flight == 1
    assert not store.acquire_capacity("x", "call-b", b, owner_b, now + 1, **args).granted
    # a's worker dies: no release, no heartbeat; its lease ends at now + 1000
    assert store.capacity_usage(now + 1001)[0].in_flight == 0
    taker = "o-taker"
    assert {r.id for r in store.claim_runs(taker, now + 1001, 1000, 10)} == {a}
    assert store.acquire_capacity("x", "call-a", a, taker, now + 1002, **args).granted


def test_a_pause_holds_every_call_until_it_ends(store: Store) -> None:
    now = 1_000_000
    a = str(uuid.uuid4())
    owner = _lease(store, a, now)
    store.pause_capacity("x", now + 5000, now)
    store.pause_capacity("x", now + 100, now)  # an earlier end does not shorten it
    grant = store.acquire_capacity(
        "x",
        "call",
        a,
        owner,
        now + 10,
        max_in_flight=None,
        calls=None,
        per_ms=1000,
        recheck_ms=1,
        lease_ms=1000,
    )
    assert (grant.granted, grant.retry_at, grant.reason) == (
        False,
        now + 5000,
        "paused by Retry-After: x",
    )
    assert store.capacity_usage(now)[0].paused_until == now + 5000


# -- configuration errors name the offending path ---------------------------------------------


def _limited_machine(limit: object) -> Machine:
    return create_machine(
        {
            "id": "m",
            "initial": "a",
            "states": {
                "a": {"invoke": {"src": "f", "limit": limit, "onDone": "b"}},
                "b": {"type": "final"},
            },
        },
        actors={"f": lambda x: x},
    )


def test_a_bad_limit_key_names_its_path() -> None:
    with pytest.raises(MachineDefinitionError, match=r"states\.a\.invoke\.limit"):
        _limited_machine(4)


def test_an_unconfigured_limit_names_the_call_site(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    machine = _limited_machine("crm")
    caplog.set_level("INFO", "statecharts.capacity")
    Runtime(store, [machine], limits={"other": Limit(max_in_flight=1)})
    assert "'m': states.a.invoke.limit: no limit 'crm' in Runtime(limits=...)" in caplog.text
    with pytest.raises(ValueError, match=r"workflow_limits\['m'\]: no limit 'nope'"):
        Runtime(store, [machine], limits={"crm": Limit(2)}, workflow_limits={"m": "nope"})
    with pytest.raises(ValueError, match="priority is an integer from 0 to 1000"):
        Runtime(store, [machine], limits={"crm": Limit(2)}, priorities={"m": 1001})
    with pytest.raises(ValueError, match=r"Limit\.max_in_flight must be an integer >= 1"):
        Limit(max_in_flight=0)


# -- upgrading -----------------------------------------------------------------------------------


def test_upgrading_to_load_control_keeps_runs_claimable(
    tmp_path: Path, pg_dsn: str, pg_schema: str
) -> None:
    """Databases at the schema before load control (SQLite and PostgreSQL) with a due run
    upgrade: the run has priority 0, waits for nothing, and is claimed."""
    from persistence.stores.sqlite import _statements

    run_id = "00000000-0000-4000-8000-000000000001"
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        _before_load_control(lambda sql: [db.execute(s) for s in _statements(sql)], "sqlite", "''")
        db.execute(
            "INSERT INTO workflow_runs (id, workflow_name, workflow_version, state, "
            "snapshot, status, created_at, updated_at, wake_at) VALUES (?, 'w', 'x', "
            "'s', '{}', 'active', 1, 1, 5)",
            (run_id,),
        )
    with psycopg.connect(pg_dsn, autocommit=True) as pg:
        pg.execute(f'CREATE SCHEMA "{pg_schema}"')
        pg.execute(f'SET search_path = "{pg_schema}"')
        _before_load_control(lambda sql: pg.execute(sql.encode()), "postgres", "now()")
        pg.execute(
            "INSERT INTO workflow_runs (id, workflow_name, workflow_version, state, "
            "snapshot, status, created_at, updated_at, wake_at) VALUES (%s, 'w', 'x', "
            "'s', '{}', 'active', now(), now(), now() - interval '1 minute')",
            (run_id,),
        )
    sep = "&" if "?" in pg_dsn else "?"
    for url in (f"sqlite:///{path}", f"{pg_dsn}{sep}schema={pg_schema}"):
        store = open_store(url, migrate=True)
        try:
            assert store.schema_version() == schema.latest_version(store.dialect)  # type: ignore[attr-defined]
            run = store.get_run(run_id)
            assert (run.priority, run.waiting_for) == (0, None)
            claimed = store.claim_runs("w", int(time.time() * 1000), 1000, 10)
            assert [r.id for r in claimed] == [run_id]
        finally:
            store.close()


def _before_load_control(run: Callable[[str], object], dialect: str, stamp: str) -> None:
    """Bring an empty database to the schema before load control, as older code did."""
    load_control = next(m.version for m in schema.migrations(dialect) if m.name == "load_control")
    before = [m for m in schema.migrations(dialect) if m.version < load_control]
    for migration in before:
        run(migration.sql)
    run(
        f"CREATE TABLE {schema.VERSION_TABLE} (version integer PRIMARY KEY, "
        f"name text NOT NULL, applied_at {'text' if dialect == 'sqlite' else 'timestamptz'})"
    )
    for migration in before:
        run(
            f"INSERT INTO {schema.VERSION_TABLE} VALUES ({migration.version}, "
            f"'{migration.name}', {stamp})"
        )


# -- where people look: the UI, the diagram, the metrics ----------------------------------------


def test_the_ui_and_the_metrics_show_what_a_run_waits_for(store: Store) -> None:
    from fastapi.testclient import TestClient

    from persistence.telemetry.metrics import LIMIT_IN_FLIGHT, RUNS_WAITING, StoreGauges
    from persistence.ui.app import create_app

    machine = _limited_machine("crm")
    rt = Runtime(store, [machine], limits={"crm": Limit(max_in_flight=1)})
    first, second = rt.start("m"), rt.start("m", priority=7)
    now = rt.clock.now()
    calls = {  # (run by run: on Citus a claim without a run stops at the first shard group)
        c.run_id: c.idempotency_key
        for run_id in (first, second)
        for c in store.claim_calls("w", now, 60_000, 10, run_id)
    }
    args = {
        "max_in_flight": 1,
        "calls": None,
        "per_ms": 1000,
        "recheck_ms": 60_000,
        "lease_ms": 60_000,
    }

    def ask(run_id: str) -> bool:
        key = calls[run_id]
        return store.acquire_capacity("crm", key, run_id, "w", now, **args, call=key).granted

    assert ask(second) and not ask(first)  # a call waits, beside its run
    client = TestClient(create_app(store, [machine]))
    page = client.get(f"/runs/{first}").text
    assert 'id="calls"' in page and "Waiting for capacity: crm" in page
    assert "priority 7" in client.get(f"/runs/{second}").text
    limits = client.get("/limits").text
    assert (
        'data-limit="crm"' in limits and "m: m.a" in limits and "1 waiting for capacity" in limits
    )
    (waiting,) = store.list_calls(first)
    assert (waiting.status, waiting.waiting_for) == ("pending", f"{CAPACITY}: crm")
    assert store.get_run(first).waiting_for is None  # the run is not held: it goes on
    readings = {(m.name, labels): v for m, labels, v in StoreGauges(rt).readings()}
    assert readings[(LIMIT_IN_FLIGHT.name, ("crm",))] == 1
    assert readings[(RUNS_WAITING.name, ("crm", CAPACITY))] == 1


def test_the_diagram_says_where_a_call_is_limited() -> None:
    from statecharts.render import to_dot, to_mermaid

    machine = _limited_machine("crm")
    assert "limited by “crm”: waits for capacity" in to_mermaid(machine)
    assert "limited by “crm”: waits for" in to_dot(machine)  # (wrapped there)


def test_a_limited_workflow_has_at_most_n_runs_working_at_once(store: Store) -> None:
    from persistence.worker import Worker

    seen: list[set[str]] = []
    ids: list[str] = []

    def probe(value: object) -> str:  # a call beside one of the two runs
        seen.append({store.get_run(r).status for n, r in enumerate(ids) if str(n) != value})
        return "ok"

    machine = create_machine(
        {
            "id": "backfill",
            "initial": "a",
            "context": lambda input: {"me": (input or {}).get("me")},
            "states": {
                "a": {"invoke": {"src": "probe", "input": lambda c, e: c["me"], "onDone": "b"}},
                "b": {"type": "final"},
            },
        },
        actors={"probe": probe},
    )
    rt = Runtime(
        store,
        [machine],
        limits={"nightly": Limit(max_in_flight=1)},
        workflow_limits={"backfill": "nightly"},
    )
    for n in range(2):
        ids.append(rt.start("backfill", {"me": str(n)}))
    Worker(rt, batch=4).run_until_idle()
    assert all(store.get_run(i).status == "done" for i in ids)
    # the second run's call waited until the first run had applied its result and let go
    assert seen == [{"active"}, {"done"}]
    assert store.capacity_usage(rt.clock.now())[0].in_flight == 0
