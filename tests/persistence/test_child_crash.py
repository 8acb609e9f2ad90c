"""Crash test of child runs: worker processes SIGKILLed at random moments while a few hundred
order -> payment -> fraud_check trees (`machines.orders`) run, on SQLite and PostgreSQL.

Default: 300 trees (900 runs); STATECHARTS_CHILD_CRASH_TREES=N any count (STATECHARTS_SOAK=1:
1,000). Afterwards, and at samples while the workers run and die:

- every parent got exactly one done or error event per child (applied once, journaled once,
  never left queued or dead-lettered);
- no child is orphaned (active while its parent has ended);
- no child was started twice for one invoke (one payment per order, one fraud check per
  payment), and every tree ended the way its card says.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

from machines.orders import MACHINES
from persistence.runtime import Runtime
from persistence.stores import RunQuery, RunRecord, Store, open_store
from tests.persistence.conftest import kill_and_replace, stop_workers
from tests.persistence.workflows import SLOW_ENV

ROOT = Path(__file__).resolve().parents[2]
SOAK = os.environ.get("STATECHARTS_SOAK", "") not in ("", "0")
TREES = int(os.environ.get("STATECHARTS_CHILD_CRASH_TREES", "1000" if SOAK else "300"))
WORKERS = 3
LEASE_MS = 1000
DEADLINE_S = 900 if SOAK else 180
CARDS = ("ok", "ok", "stolen")  # two trees in three complete, one fails at the grandchild
RESULT_TYPES = ("xstate.done.actor.", "xstate.error.actor.")


def _spawn(url: str, log: Path) -> subprocess.Popen[bytes]:
    """A worker process over `machines.orders`' tree with each call slowed by 15 ms."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "persistence.cli",
            "worker",
            "--store",
            url,
            "--machines",
            "tests.persistence.workflows:SLOW_ORDERS",
            "--concurrency",
            "2",
            "--batch",
            "4",
            "--lease-ms",
            str(LEASE_MS),
            "--poll-ms",
            "20",
            "--log-level",
            "ERROR",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), SLOW_ENV: "15"},
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
    )


def _all(store: Store, query: RunQuery) -> list[RunRecord]:
    found: list[RunRecord] = []
    while True:
        page = store.search_runs(query, limit=1000, offset=len(found))
        found += page
        if len(page) < 1000:
            return found


def _orphans(store: Store) -> list[str]:
    """Active child runs whose parent has ended (the child read again after its parent: an
    ended parent stays ended, so a child still active then is an orphan)."""
    active = [r for r in _all(store, RunQuery(status="active")) if r.parent_run_id]
    return [
        r.id
        for r in active
        if store.get_run(r.parent_run_id or "").terminal and not store.get_run(r.id).terminal
    ]


def test_sigkilled_workers_deliver_each_child_result_once_and_orphan_nothing(
    crash_url: str, tmp_path: Path
) -> None:
    rng = random.Random(int(os.environ.get("STATECHARTS_CRASH_SEED", "18")))
    store = open_store(crash_url, migrate=True)
    runtime = Runtime(store, list(MACHINES.values()))
    cards = {
        runtime.start(
            "order", {"order_id": n, "card": CARDS[n % 3], "amount": n}, key=f"order-{n}"
        ): CARDS[n % 3]
        for n in range(TREES)
    }
    log = tmp_path / "workers.log"
    workers = [_spawn(crash_url, log) for _ in range(WORKERS)]
    kills, orphans, started = 0, [], time.monotonic()
    try:
        while store.count_runs().get("active", 0) and time.monotonic() - started < DEADLINE_S:
            time.sleep(rng.uniform(0.1, 0.4))
            if kills < 12 and store.count_runs().get("active", 0):
                kill_and_replace(
                    workers, rng.randrange(len(workers)), lambda: _spawn(crash_url, log)
                )
                kills += 1
                if kills % 4 == 0:
                    orphans += _orphans(store)
        assert not store.count_runs().get("active", 0), (
            f"runs still active after {DEADLINE_S}s: {store.count_runs()}"
        )
    finally:
        stop_workers(workers)  # (each once it handles SIGTERM: one spawned just now may not)
    assert kills >= 3, "the test must actually kill workers"
    assert all(w.returncode == 0 for w in workers), log.read_text()[-3000:]
    assert orphans == [] and _orphans(store) == []
    _check(store, cards)
    print(f"\nchild-run crash test: {TREES} trees, {kills} kills")
    store.close()


def _check(store: Store, cards: dict[str, str]) -> None:
    runs = _all(store, RunQuery())
    assert len(runs) == 3 * len(cards), "one payment per order, one fraud check per payment"
    children: dict[str, list[RunRecord]] = {}
    for run in runs:
        if run.parent_run_id is not None:
            children.setdefault(run.parent_run_id, []).append(run)
    for order_id, card in cards.items():
        order = store.get_run(order_id)
        (payment,) = children[order_id]
        (fraud,) = children[payment.id]
        assert (payment.parent_invoke_id, fraud.parent_invoke_id) == ("payment", "fraud_check")
        assert fraud.key == f"{order.key}/payment/fraud_check"
        expected = (
            ("confirmed", "done", "done") if card == "ok" else ("payment_failed", "error", "error")
        )
        assert (order.state, payment.status, fraud.status) == expected, order_id
        assert order.status == "done"
        for parent, child in ((order, payment), (payment, fraud)):
            results = [
                e.event["type"]
                for e in store.list_events(parent.id)
                if str(e.event.get("type")).startswith(RESULT_TYPES)
                and str(e.event["type"]).endswith(f".{child.parent_invoke_id}")
            ]
            assert results == [
                f"xstate.{'done' if child.status == 'done' else 'error'}"
                f".actor.{child.parent_invoke_id}"
            ], (parent.id, results)
            assert store.pending_events(parent.id) == [] and store.dead_letters(parent.id) == []
