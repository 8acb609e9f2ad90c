"""How fast the UI's pages answer with many runs in the store (a measurement, not a test).

    python -m tests.ui.bench_pages sqlite [RUNS]          # a temporary SQLite file
    python -m tests.ui.bench_pages postgresql://localhost/test [RUNS]   # a fresh schema there

Fills the store with RUNS (default 100,000) runs of the demo workflows spread over 30 days and
all statuses (bulk-inserted rows shaped like real ones), then times each page and API call
through the app in process, and prints the database's plan for the list queries.
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import orjson

from persistence.stores import Store, open_store
from tests.ui.demo import MACHINES, ORDER, fill

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

DAY = 86_400_000
STATES = [
    ("awaiting_payment", "active"),
    ("awaiting_approval", "active"),
    ("charging_card.waiting_to_retry", "active"),
    ("shipped", "done"),
    ("rejected", "done"),
    ("awaiting_payment", "cancelled"),
    ("charging_card.attempting", "error"),
]
WEIGHTS = [10, 15, 2, 55, 10, 5, 3]


def bulk_rows(store: Store, n: int, now: int) -> None:
    """Insert `n` order runs with real snapshots, in big transactions."""
    template = store.search_runs(__import__("persistence.stores").stores.RunQuery(), 1)[0]
    rng = random.Random(7)
    rows: list[tuple[Any, ...]] = []
    for i in range(n):
        state, status = rng.choices(STATES, WEIGHTS)[0]
        created = now - rng.randrange(30 * DAY)
        updated = min(now, created + rng.randrange(DAY))
        snapshot = {
            **template.snapshot,
            "value": state.split(".")[0],
            "context": {"customer": f"customer {i}", "amount": i % 500},
        }
        rows.append(
            (
                str(uuid.uuid4()),
                "order",
                ORDER.fingerprint,
                f"bulk-{i}",
                state,
                orjson.dumps(snapshot).decode(),
                status,
                0,
                created,
                updated,
                updated if status != "active" else None,
                updated if status == "error" else None,
                "TimeoutError: slow" if status == "error" else None,
                None,
                None,
                None,
                2,
            )
        )
    columns = (
        "id, workflow_name, workflow_version, key, state, snapshot, status, attempt_count, "
        "created_at, updated_at, completed_at, failed_at, last_error, wake_at, "
        "lease_owner, lease_expires_at, version"
    )
    dialect = getattr(store, "dialect", "sqlite")
    if dialect == "sqlite":
        conn = store._conn  # type: ignore[attr-defined]
        with store._lock:  # type: ignore[attr-defined]
            conn.execute("BEGIN")
            conn.executemany(
                f"INSERT INTO workflow_runs ({columns}) VALUES ({','.join('?' * 17)})", rows
            )
            conn.execute("COMMIT")
            conn.execute("ANALYZE")
    else:
        from persistence.stores.postgres import to_ts

        converted = [(*r[:8], *(to_ts(t) for t in r[8:12]), *r[12:]) for r in rows]
        with store._conn() as conn, conn.cursor() as cur:  # type: ignore[attr-defined]
            cur.executemany(
                f"INSERT INTO workflow_runs ({columns}) VALUES ({','.join(['%s'] * 17)})", converted
            )
            conn.commit()
            conn.autocommit = True  # as autovacuum would have done on a live database
            conn.execute("VACUUM ANALYZE workflow_runs")
            conn.autocommit = False


def timed(client: TestClient, path: str, repeat: int = 5) -> float:
    """Median milliseconds of GET `path` (after one warm-up)."""
    assert client.get(path).status_code == 200, path
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        response = client.get(path)
        times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, path
    return sorted(times)[len(times) // 2]


def main(argv: list[str]) -> int:
    """Fill, time, print."""
    target = argv[0] if argv else "sqlite"
    n = int(argv[1]) if len(argv) > 1 else 100_000
    tmp = tempfile.mkdtemp(prefix="statecharts-ui-bench-")
    if target == "sqlite":
        url = f"sqlite:///{Path(tmp) / 'runs.db'}"
    else:
        url = f"{target}{'&' if '?' in target else '?'}schema=bench_{uuid.uuid4().hex[:8]}"
    demo = fill(url)
    store = open_store(url)
    now = int(time.time() * 1000)
    start = time.perf_counter()
    bulk_rows(store, n, now)
    print(f"{target}: inserted {n} runs in {time.perf_counter() - start:.1f}s")
    from persistence.ui import create_app

    client = TestClient(create_app(store, MACHINES))
    paths = [
        "/",
        "/?status=error",
        "/?status=stuck",
        "/?status=active&page=200",
        "/?workflow=order&state=awaiting_approval",
        "/?key=bulk-4242",
        "/?age=1h",
        "/?page=1500",
        f"/runs/{demo.retrying}",
        "/workflows/order",
        "/workflows",
        "/api/runs?status=done&page_size=100",
        f"/api/runs/{demo.retrying}",
    ]
    for path in paths:
        print(f"  {timed(client, path):8.1f} ms  GET {path}")
    if target == "sqlite":
        from persistence.stores import RunQuery
        from persistence.stores.queries import run_query_sql

        for query in (
            RunQuery(status="error"),
            RunQuery(workflow_name="order", state="shipped"),
            RunQuery(stuck_before=now),
        ):
            where, params = run_query_sql(query, "?", int)
            plan = store._read(  # type: ignore[attr-defined]
                f"EXPLAIN QUERY PLAN SELECT id FROM workflow_runs {where} "
                "ORDER BY created_at DESC, id LIMIT 50",
                params,
            )
            print(f"  plan {query}: {[row[-1] for row in plan]}")
    store.close()
    shutil.rmtree(tmp, ignore_errors=True)
    if target != "sqlite":
        import psycopg

        schema = url.rsplit("schema=", 1)[1]
        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
