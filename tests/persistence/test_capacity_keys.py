"""Per-key limits (`Limit(max_in_flight=4, key="tenant")`) on real worker subprocesses, on
SQLite and PostgreSQL: a tenant with a long backlog does not hold up another tenant's runs, no
tenant ever has more than its 4 calls in flight (as the fake downstream's ledger saw them), and
a SIGKILLed worker's slots of a key come back. In process, on every store: each key has its own
slots and queue, and a run whose context has no key fails saying which.

The big tenant has `BIG_TENANT_RUNS` runs: 500 by default, 10,000 in `make soak`
(`STATECHARTS_SOAK=1`; `STATECHARTS_KEYS_SOAK=N` sets N), minutes long on a loaded machine.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from persistence.capacity import Limit, LimitKeyError
from persistence.ingress import create_api
from persistence.runtime import Runtime
from persistence.stores import NewRun, RunQuery, Store
from persistence.stores.capacity import CAPACITY
from persistence.stores.records import Grant
from persistence.ui.app import create_app
from persistence.ui.views import limit_rows
from persistence.worker import Worker
from statecharts import SimulatedClock, SystemClock, assign, create_machine
from statecharts.clock import Clock
from tests.persistence import limited, test_fault_injection
from tests.persistence.test_capacity import fleet, runtime, waits
from tests.persistence.test_fault_injection import Env, ended, stop_cleanly, wait_until

e = test_fault_injection.e  # the fixture: a SQLite file, then a PostgreSQL schema, with a ledger

BIG_TENANT_RUNS = int(
    os.environ.get("STATECHARTS_KEYS_SOAK")
    or (10_000 if os.environ.get("STATECHARTS_SOAK") else 500)
)
SMALL_TENANT_RUNS = 8
CALL_MS = 20
BIG_TENANT_CALLS = 300
BATCH = 8


def _active(store: Store) -> int:
    return store.count_matching(RunQuery(workflow_name="tenanted")).get("active", 0)


def test_a_tenants_backlog_does_not_hold_up_another_tenant(e: Env) -> None:
    rt = runtime(e)
    big = [
        rt.start("tenanted", {"name": "t-big", "tenant": "big", "ms": CALL_MS})
        for _ in range(BIG_TENANT_RUNS)
    ]
    timeout = 60.0 + BIG_TENANT_RUNS / 5
    with fleet(e, 2, 2) as running:
        # the big tenant is draining (its queue is parked: 4 at a time) when the small comes
        wait_until(
            lambda: len(limited.intervals("t-big")) >= 8, "the big tenant is draining", timeout
        )
        asked = time.time()
        small = [
            rt.start("tenanted", {"name": "t-small", "tenant": "small", "ms": CALL_MS})
            for _ in range(SMALL_TENANT_RUNS)
        ]
        wait_until(ended(e.store, small), "the small tenant's runs ended", timeout)
        small_done = time.time()
        big_left = _active(e.store)
        usage = {u.name: u for u in e.store.capacity_usage(rt.clock.now())}
        wait_until(lambda: _active(e.store) == 0, "the big tenant drained", timeout * 4)
        drained = time.time()
        stop_cleanly(running)
    assert big_left > 0, "the small tenant's runs ended only once the big tenant had drained"
    # every call ran, none more than once; at most 4 per tenant at any instant, by the ledger
    assert len(limited.intervals("t-big")) == BIG_TENANT_RUNS
    assert len(limited.intervals("t-small")) == SMALL_TENANT_RUNS
    assert limited.max_in_flight("t-big") <= 4
    assert limited.max_in_flight("t-small") <= 4
    assert all(e.store.get_run(i).status == "done" for i in [*big[-5:], *small])
    assert usage["tenant[big]"].waiting[CAPACITY] > 0  # per key, as the limits page shows it
    waited = max(end for _, _, end in limited.intervals("t-small")) - asked
    print(
        f"\n{e.kind}: {BIG_TENANT_RUNS} queued runs of tenant big, limit 4 per tenant: the "
        f"small tenant's {SMALL_TENANT_RUNS} runs ended {waited:.2f} s after they were "
        f"started (all ended {small_done - asked:.2f} s by the store) with {big_left} of "
        f"big's still active; big drained {drained - asked:.2f} s after"
    )


def test_a_killed_workers_slots_of_a_key_come_back(e: Env) -> None:
    rt = runtime(e)
    slow = [rt.start("tenant_calls", {"name": "t-k", "tenant": "k", "ms": 1500}) for _ in range(4)]
    with fleet(e, 1, 4) as first:
        wait_until(lambda: len(limited.intervals("t-k")) == 4, "4 calls of tenant k in flight")
        queued = [
            rt.start("tenant_calls", {"name": "t-k", "tenant": "k", "ms": 50}) for _ in range(3)
        ]
        wait_until(
            lambda: all(waits(e.store, i) == f"{CAPACITY}: tenant_call[k]" for i in queued),
            "the newcomers wait for tenant k's slots",
        )
        first[0].process.send_signal(signal.SIGKILL)
        first[0].process.wait(timeout=10)
        killed_at = time.time()
    with fleet(e, 2) as second:
        wait_until(ended(e.store, [*slow, *queued]), "every run ended after the kill")
        stop_cleanly(second)
    assert limited.max_in_flight("t-k", killed_at) <= 4
    assert all(e.store.get_run(i).status == "done" for i in [*slow, *queued])
    assert e.store.capacity_usage(rt.clock.now())[0].in_flight == 0


# -- the store's rules, in process, on every store -------------------------------------------


def _leased(store: Store, now: int) -> tuple[str, str]:
    """A new run, claimed: (its id, its lease owner)."""
    run_id, owner = str(uuid.uuid4()), f"o-{uuid.uuid4()}"
    store.create_run(NewRun(run_id, "w", "v", None, "s", {}, wake_at=now), [], now)
    assert [r.id for r in store.claim_runs(owner, now, 10_000, 1)] == [run_id]
    return run_id, owner


def test_each_key_has_its_own_slots_and_queue(store: Store) -> None:
    now, grants = 1_000_000, {}
    for key in ("a", "b"):
        for n in range(3):
            run_id, owner = _leased(store, now)
            grants[key, n] = store.acquire_capacity(
                f"tenant[{key}]",
                f"run:{run_id}",
                run_id,
                owner,
                now,
                max_in_flight=2,
                calls=None,
                per_ms=1000,
                recheck_ms=60_000,
                lease_ms=10_000,
            ).granted
    # a's third run waits for a's slots; b's first two are not held up by a's queue
    assert grants == {
        ("a", 0): True,
        ("a", 1): True,
        ("a", 2): False,
        ("b", 0): True,
        ("b", 1): True,
        ("b", 2): False,
    }
    usage = {u.name: (u.in_flight, dict(u.waiting)) for u in store.capacity_usage(now)}
    assert usage == {"tenant[a]": (2, {CAPACITY: 1}), "tenant[b]": (2, {CAPACITY: 1})}
    assert store.limit_shares("tenant") == ["tenant[a]", "tenant[b]"]
    assert store.limit_shares("tenant", "tenant[a]") == ["tenant[b]"]
    assert store.limit_shares("ten") == []


def test_the_limits_page_shows_each_key(store: Store) -> None:
    rt = Runtime(store, limited.MACHINES, limits=limited.LIMITS)
    now = rt.clock.now()
    for key in ("acme", "acme", "initech"):
        run_id, owner = _leased(store, now)
        store.acquire_capacity(
            f"tenant_call[{key}]",
            f"run:{run_id}",
            run_id,
            owner,
            now,
            max_in_flight=1,
            calls=None,
            per_ms=1000,
            recheck_ms=60_000,
            lease_ms=10_000,
        )
    rows = limit_rows(store, list(rt.machines.values()), now)
    keyed = [
        (r.limit, r.key, r.in_flight, r.waiting, r.sites) for r in rows if r.limit == "tenant_call"
    ]
    sites = ["tenant_calls: tenant_calls.calling"]
    assert keyed == [
        ("tenant_call", None, 0, [], sites),  # the call sites' limit, its keys
        ("tenant_call", "acme", 1, [(CAPACITY, 1)], sites),
        ("tenant_call", "initech", 1, [], sites),
    ]
    page = TestClient(create_app(store, list(rt.machines.values()))).get("/limits").text
    row = page[page.index('data-limit="tenant_call[acme]"') :]
    row = row[: row.index("</tr>")]
    assert '<td class="mono">acme</td>' in row and "1 waiting for capacity" in row


def _keyed(store: Store, clock: SimulatedClock | None = None) -> Runtime:
    """A workflow limited per account (`account.id`) that waits for GO, then for NEXT; GO may
    drop the account (`{"drop": true}`). Started with `{"due": true}`, it is due at once (a
    timer of 1 ms) and ends."""
    machine = create_machine(
        {
            "id": "keyed",
            "initial": "starting",
            "context": lambda i: dict(i or {}),
            "states": {
                "starting": {"always": [{"target": "due", "guard": "due"}, {"target": "working"}]},
                "due": {"after": {"1": "done"}},
                "working": {"on": {"GO": {"target": "next", "actions": "maybeDrop"}}},
                "next": {"on": {"NEXT": "done"}},
                "done": {"type": "final"},
            },
        },
        guards={"due": lambda c, e: bool(c.get("due"))},
        actions={"maybeDrop": assign(lambda c, e: {"account": {}} if e.get("drop") else {})},
    )
    return Runtime(
        store,
        [machine],
        limits={"per_account": Limit(max_in_flight=1, key="account.id", recheck_ms=60_000)},
        workflow_limits={"keyed": "per_account"},
        clock=clock,
    )


def test_a_run_without_its_key_is_refused_or_fails_naming_the_limit_and_the_field(
    store: Store,
) -> None:
    rt = _keyed(store)
    message = (
        "limit 'per_account' is per key context.account.id: the run's context has no "
        "context.account.id"
    )
    with pytest.raises(LimitKeyError) as refused:  # it could never be stepped: not started
        rt.start("keyed", {"account": {}})
    assert str(refused.value) == message and store.list_runs(limit=10) == []
    answer = TestClient(create_api(rt)).post(
        "/api/workflows/keyed/runs", json={"input": {"account": {}}}
    )
    assert answer.status_code == 422 and answer.json()["detail"] == [
        {"loc": ["body", "input"], "msg": message, "type": "value_error"}
    ]
    assert store.list_runs(limit=10) == []
    good, dropped = (
        rt.start("keyed", {"account": {"id": 7}}),
        rt.start("keyed", {"account": {"id": 8}}),
    )
    rt.send(good, {"type": "GO"})
    rt.send(dropped, {"type": "GO", "drop": True})  # its next step has no key any more
    Worker(rt, batch=4).run_until_idle()
    rt.send(good, {"type": "NEXT"})
    rt.send(dropped, {"type": "NEXT"})
    Worker(rt, batch=4).run_until_idle()
    assert store.get_run(good).status == "done"
    failed = store.get_run(dropped)
    assert (failed.status, failed.last_error) == ("error", message)


def test_a_refusal_queues_the_keys_unclaimed_backlog_out_of_the_claim_order(store: Store) -> None:
    clock = SimulatedClock(1_000_000)
    rt = _keyed(store, clock)

    def start(account: str) -> str:
        clock.advance(1)  # one start per millisecond: the arrival order is known
        return rt.start("keyed", {"account": {"id": account}, "due": True})

    big = [start("big") for _ in range(6)]
    small = [start("small") for _ in range(2)]
    now = clock.now() + 10
    first, second = store.claim_runs("w1", now, 60_000, 2)
    assert [first.id, second.id] == big[:2]  # in due order
    assert rt.load.enter(
        first.id, "w1", [("per_account[big]", f"run:{first.id}")], now, 60_000
    ).granted
    assert not rt.load.enter(
        second.id, "w1", [("per_account[big]", f"run:{second.id}")], now, 60_000
    ).granted
    # the refusal queued big's four unclaimed runs with it: the next claims are small's
    assert {store.get_run(i).waiting_for for i in big[1:]} == {f"{CAPACITY}: per_account[big]"}
    assert {r.id for r in store.claim_runs("w2", now, 60_000, 10)} == set(small)
    usage = {u.name: dict(u.waiting) for u in store.capacity_usage(now)}
    assert usage["per_account[big]"] == {CAPACITY: 5}
    # the queue is in start order: each freed slot goes to the next big run as it started
    order = []
    holder = first.id
    for n in range(5):
        store.release_capacity(
            "per_account[big]", [f"run:{holder}"], now + n, max_in_flight=1, lease_ms=60_000
        )
        (woken,) = store.claim_runs("w1", now + n, 60_000, 1)  # the slot's run, woken first
        place = ("per_account[big]", f"run:{woken.id}")
        assert rt.load.enter(woken.id, "w1", [place], now + n, 60_000).granted
        holder = woken.id
        order.append(holder)
    assert order == big[1:]


@pytest.mark.parametrize("key", ["", "a..b", 3])
def test_a_bad_key_is_refused_when_the_limit_is_made(key: object) -> None:
    with pytest.raises(ValueError, match=r"Limit\.key"):
        Limit(max_in_flight=1, key=key)  # type: ignore[arg-type]


def test_a_rate_limit_per_key_holds_each_key_to_its_own_window(store: Store) -> None:
    clock = SimulatedClock(1_000_000)
    machine = create_machine(
        {
            "id": "rated_per_key",
            "initial": "calling",
            "context": lambda i: dict(i),
            "states": {
                "calling": {"invoke": {"src": "call", "limit": "api", "onDone": "done"}},
                "done": {"type": "final"},
            },
        },
        actors={"call": lambda value: "ok"},
    )
    rt = Runtime(
        store, [machine], clock=clock, limits={"api": Limit(calls=1, per_ms=1000, key="tenant")}
    )
    a1, a2, b1 = (rt.start("rated_per_key", {"tenant": t}) for t in ("a", "a", "b"))
    Worker(rt, batch=4).run_until_idle()
    # one call per second per tenant: a's second waits for a's window (beside its run), b's
    # went at once
    assert store.get_run(b1).status == "done"
    rows = sorted((store.get_run(i).status, waits(store, i)) for i in (a1, a2))
    assert rows == [("active", "rate limited: api[a]"), ("done", None)]
    clock.advance(1000)
    Worker(rt, batch=4).run_until_idle()
    assert {store.get_run(i).status for i in (a1, a2)} == {"done"}


def test_a_fork_of_a_keyed_run_takes_the_share_of_its_steps_key(store: Store) -> None:
    """A fork is a new run of the limited workflow: it is written with the per-key share a
    start with its context is (`workflow_runs.limit_share`, by which a refusal of that key
    queues the key's unclaimed backlog with it), not with none."""
    if not hasattr(store, "_read"):
        pytest.skip("the in-memory store parks runs by their context, not a stored share")
    rt = _keyed(store)
    original = rt.start("keyed", {"account": {"id": 7}})
    rt.send(original, {"type": "GO"})
    Worker(rt, batch=4).run_until_idle()  # (a limited workflow's event: a worker's step)
    fork = rt.fork(original, 2)  # (the first step the journal has a snapshot of)
    shares = {
        str(run_id): share
        for run_id, share in store._read(  # type: ignore[attr-defined]
            "SELECT id, limit_share FROM workflow_runs", ()
        )
    }
    assert shares == {original: "per_account[7]", fork.id: "per_account[7]"}


def _tenant_work(
    store: Store, slots: int, clock: Clock | None = None, recheck_ms: int = 1_000
) -> tuple[Runtime, Callable[[str], str]]:
    """A workflow limited to `slots` runs per tenant (the run's `tenant`) whose run makes one
    call and ends; and a start of a run for a tenant, one per millisecond of `clock` (the
    arrival order is known; with None, a simulated clock; with the real one, as they come)."""
    clock = clock or SimulatedClock(1_000_000)
    machine = create_machine(
        {
            "id": "tenant_work",
            "initial": "calling",
            "context": lambda i: dict(i),
            "states": {
                "calling": {"invoke": {"src": "work", "onDone": "done"}},
                "done": {"type": "final"},
            },
        },
        actors={"work": lambda value: "ok"},
    )
    rt = Runtime(
        store,
        [machine],
        clock=clock,
        limits={"tenant": Limit(max_in_flight=slots, key="tenant", recheck_ms=recheck_ms)},
        workflow_limits={"tenant_work": "tenant"},
    )

    def start(tenant: str) -> str:
        if isinstance(clock, SimulatedClock):
            clock.advance(1)
        return rt.start("tenant_work", {"tenant": tenant})

    return rt, start


def test_a_refused_call_queues_its_keys_backlog_of_calls_out_of_the_claim_order(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fairness above at a size the suite affords, counted instead of timed. A limited
    workflow's calls ask for their run's place one call at a time (beside their runs, which
    wait for them with no wake time); a refusal queues the key's other due, unclaimed calls
    with it, so the big tenant's backlog is refused about a batch's worth of times, not once
    per call (and again after every `recheck_ms`), and the small tenant's calls are asked for
    right after; the big tenant's calls are then granted as freed slots wake them, about in
    the order they arrived. A run's own step asks for its place once, to apply its call's
    result, and is granted: the place its call took stays the run's until then (never handed
    to the queue in between, which left the run's last step refused and claimed again), and
    no run is claimed only to take the place its waiting call was woken for."""
    rt, start = _tenant_work(store, 4)
    big = [start("big") for _ in range(BIG_TENANT_CALLS)]
    small = [start("small") for _ in range(SMALL_TENANT_RUNS)]
    asked: list[tuple[str, bool]] = []  # a call's run, granted: in the order the store answered
    stepped: list[tuple[str, bool]] = []  # the same, for a run's own steps
    acquire = store.acquire_capacity

    def counted(name: str, holder: str, run_id: str, *args: Any, **kwargs: Any) -> Grant:
        grant = acquire(name, holder, run_id, *args, **kwargs)
        (asked if kwargs.get("call") is not None else stepped).append((run_id, grant.granted))
        return grant

    monkeypatch.setattr(store, "acquire_capacity", counted)
    Worker(rt, batch=BATCH).run_until_idle()
    assert {store.get_run(i).status for i in [*big, *small]} == {"done"}
    refused = [run_id for run_id, granted in asked if not granted]
    small_asked = next(n for n, (run_id, _) in enumerate(asked) if run_id in small)
    assert len(refused) <= 2 * BATCH  # (one refusal per big call, 296, before the queueing)
    assert len([r for r, granted in asked[:small_asked] if not granted]) <= 2 * BATCH
    assert {store.get_run(i).status for i in small} == {"done"}
    granted = [run_id for run_id, ok in asked if ok and run_id in big]
    arrived = {run_id: n for n, run_id in enumerate(big)}
    assert sorted(granted) == sorted(big)  # each granted once
    assert max(abs(n - arrived[run_id]) for n, run_id in enumerate(granted)) <= 2 * 4
    # (about 120 of about 730 were refused before the place stayed the run's until then)
    assert [run_id for run_id, ok in stepped if not ok] == []
    assert sorted(run_id for run_id, _ in stepped) == sorted([*big, *small])


def test_a_refused_call_releases_the_calls_its_executor_claimed_of_the_same_key(
    store: Store,
) -> None:
    """An executor claims due calls in a burst (up to 500) and asks for their places one by
    one: the first refusal of a key's share queues and releases the executor's other claimed
    calls of that key too (the grant names them: the executor drops them), so it does not ask
    for each only to be refused while other keys' calls wait; their claims' attempts are
    taken back (waiting is no attempt), and the queue keeps the arrival order."""
    rt, start = _tenant_work(store, 1)
    big = [start("big") for _ in range(5)]
    small = [start("small") for _ in range(2)]
    now = rt.clock.now()
    claimed = {c.run_id: c for c in store.claim_calls("executor", now, 60_000, 10)}
    assert set(claimed) == {*big, *small}

    def ask(run_id: str) -> Grant:
        return rt.load.enter(
            run_id,
            "executor",
            [(f"tenant[{store.get_run(run_id).snapshot['context']['tenant']}]", f"run:{run_id}")],
            now,
            60_000,
            claimed[run_id].idempotency_key,
        )

    assert ask(big[0]).granted
    refused = ask(big[1])
    assert not refused.granted
    for run_id in big[1:]:
        (call,) = store.list_calls(run_id)
        assert (call.status, call.owner, call.waiting_for) == (
            "pending",
            None,
            f"{CAPACITY}: tenant[big]",
        )
        assert store.call_attempts(run_id) == []
    assert sorted(refused.released) == sorted(claimed[r].idempotency_key for r in big[2:])
    assert ask(small[0]).granted  # the other key's calls are not held up
    usage = {u.name: dict(u.waiting) for u in store.capacity_usage(now)}
    assert usage["tenant[big]"] == {CAPACITY: 4}
    order, holder = [], big[0]
    for n in range(4):  # each freed slot goes to the next big call as it arrived
        store.release_capacity(
            "tenant[big]", [f"run:{holder}"], now + n, max_in_flight=1, lease_ms=60_000
        )
        (woken,) = store.claim_calls("executor", now + n, 60_000, 10)
        holder, claimed[woken.run_id] = woken.run_id, woken
        assert ask(holder).granted
        order.append(holder)
    assert order == big[1:]


def test_an_executor_drops_the_calls_a_refusal_released_without_asking_for_them(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's executor claims the due calls in one burst and asks for their places one by
    one; the first refusal of a key's share releases the burst's other calls of that key (the
    grant names them), and the executor drops them (`CallExecutor._parked`): it neither asks
    for their places, only to be refused one by one, nor runs them (they are no longer its to
    run). Each runs once, later, when a freed slot is reserved for it and it is claimed again."""
    if store.url.startswith("citus"):
        pytest.skip("on Citus a claim takes one shard group's calls: not all five in one burst")
    rt, start = _tenant_work(store, 1, SystemClock(), recheck_ms=600_000)
    runs = [start("big") for _ in range(5)]  # (all due before the worker's first claim)
    asked: list[tuple[str, bool, tuple[str, ...]]] = []
    acquire = store.acquire_capacity

    def counted(name: str, holder: str, run_id: str, *args: Any, **kwargs: Any) -> Grant:
        grant = acquire(name, holder, run_id, *args, **kwargs)
        if kwargs.get("call") is not None:  # (a run's own step asks too: not counted here)
            asked.append((run_id, grant.granted, grant.released))
        return grant

    monkeypatch.setattr(store, "acquire_capacity", counted)
    worker = Worker(rt, 1, poll_ms=20, lease_ms=30_000)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_until(ended(store, runs), "every run ended")
    finally:
        worker.stop()
        thread.join()
    assert {store.get_run(i).status for i in runs} == {"done"}
    refused = [(run_id, released) for run_id, ok, released in asked if not ok]
    # the second call was refused and released the other three; none of those was asked for
    # until a slot was reserved for it (then granted)
    assert [len(released) for _, released in refused] == [3]
    assert sorted(run_id for run_id, ok, _ in asked if ok) == sorted(runs)  # each granted once
    assert [len(store.call_attempts(i)) for i in runs] == [1] * 5  # each call ran once
