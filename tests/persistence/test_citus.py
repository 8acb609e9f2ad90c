"""The store on a real Citus cluster (docs/citus.md): opt-in, with STATECHARTS_CITUS_DSN naming
the coordinator of a cluster with worker nodes (`make test-citus`); skipped, saying so, without
it. The contract suite, the crash test, child runs and limits run on Citus through the `citus`
store kind of `conftest.STORE_KINDS`; this module checks what is Citus's own: where rows are
placed and that every statement of a run's life is routed to one shard."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from machines.orders import order as order_tree
from persistence import Runtime, Worker
from persistence.stores import NewRun, open_store
from persistence.stores.citus import CitusStore, run_hash
from tests.persistence.conftest import CITUS_DSN, citus_url
from tests.persistence.workflows import LEDGER_ENV, init_ledger
from tests.persistence.workflows import order as order_with_calls


@pytest.fixture
def citus(citus_schema: str) -> Iterator[CitusStore]:
    """A migrated `CitusStore` in a fresh schema of the coordinator."""
    store = open_store(citus_url(citus_schema), migrate=True)
    assert isinstance(store, CitusStore)
    yield store
    store.close()


def _coordinator() -> psycopg.Connection[Any]:
    assert CITUS_DSN is not None
    return psycopg.connect(CITUS_DSN, autocommit=True)


def _shard_of(conn: psycopg.Connection[Any], schema: str, run_id: str) -> int:
    row = conn.execute(
        "SELECT get_shard_id_for_distribution_column(%s, %s::uuid)",
        (f"{schema}.workflow_runs", run_id),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_run_hash_is_the_hash_citus_places_runs_by(citus: CitusStore) -> None:
    ids = [uuid.uuid4() for _ in range(300)]
    with _coordinator() as conn:
        rows = conn.execute("SELECT u, worker_hash(u) FROM unnest(%s::uuid[]) u", (ids,))
        pairs = [(u, int(h)) for u, h in rows]
    assert len(pairs) == 300
    assert [(u, run_hash(u)) for u, _ in pairs] == pairs


def test_the_tables_are_distributed_and_a_run_tree_lives_on_its_roots_shard(
    citus: CitusStore, citus_schema: str
) -> None:
    runtime = Runtime(citus, [order_tree])
    root = runtime.start("order", {"order_id": 7, "card": "ok", "amount": 30}, key="order-7")
    Worker(runtime).run_until_idle()
    with _coordinator() as conn:
        distributed = {
            r[0].split(".")[-1]
            for r in conn.execute(
                "SELECT logicalrelid::text FROM pg_dist_partition WHERE logicalrelid::text LIKE %s",
                (f"{citus_schema}.%",),
            )
        }
        assert {"workflow_runs", "workflow_inbox", "workflow_calls", "workflow_run_keys"} <= (
            distributed
        )
        tree = [
            str(r[0])
            for r in conn.execute(
                f'SELECT id FROM "{citus_schema}".workflow_runs WHERE id = %s::uuid '
                f"OR parent_run_id IS NOT NULL",
                (root,),
            )
        ]
        assert len(tree) == 3  # the order, its payment, the payment's fraud check
        assert len({_shard_of(conn, citus_schema, run_id) for run_id in tree}) == 1
        nodes = conn.execute(
            "SELECT count(DISTINCT nodeport) FROM citus_shards WHERE table_name = %s::regclass",
            (f"{citus_schema}.workflow_runs",),
        ).fetchone()
        assert nodes is not None and nodes[0] >= 2, "the runs' shards are on two worker nodes"
    assert citus.get_run(root).status == "done"


def test_a_key_is_started_once_across_the_cluster(citus: CitusStore) -> None:
    results: list[tuple[str, bool]] = []

    def start(n: int) -> None:
        run = NewRun(str(uuid.uuid4()), "w", "v", "the-key", "s", {"n": n}, wake_at=None)
        record, created = citus.create_run(run, [], 1_000)
        results.append((record.id, created))

    threads = [threading.Thread(target=start, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(created for _, created in results) == 1
    assert len({run_id for run_id, _ in results}) == 1
    found = citus.find_run("w", "the-key")
    assert found is not None and found.id == results[0][0]


def test_claims_take_from_every_shard_in_turn(citus: CitusStore) -> None:
    ids = set()
    for n in range(40):
        run = NewRun(str(uuid.uuid4()), "w", "v", None, "s", {"n": n}, wake_at=1_000)
        ids.add(citus.create_run(run, [], 1_000)[0].id)
    claimed: set[str] = set()
    for _ in range(40):
        claimed |= {r.id for r in citus.claim_runs("me", 2_000, 60_000, 4)}
    assert claimed == ids
    assert citus.claim_runs("me", 2_000, 60_000, 4) == []


def test_every_statement_of_a_runs_life_is_routed_to_one_shard(
    citus: CitusStore, citus_schema: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Starts (with a key, with child runs), sends, claims, steps, calls and their leases of
    two workflows, as a worker runs them: every statement sent to the coordinator that
    touches the run tables is planned by Citus as one task (`EXPLAIN`: "Task Count: 1"), and
    every one sent to a worker node names that node's shard tables (a claim's)."""
    ledger = str(tmp_path / "ledger.db")
    init_ledger(ledger)
    monkeypatch.setenv(LEDGER_ENV, ledger)
    runtime = Runtime(citus, [order_tree, order_with_calls])

    def life() -> None:
        tree = runtime.start("order", {"order_id": 7, "card": "ok", "amount": 30}, key="o-7")
        runtime.start("order", {"order_id": 7, "card": "ok", "amount": 30}, key="o-7")
        calls = runtime.start(order_with_calls.id, {"amount": 5})
        worker, deadline = Worker(runtime), time.monotonic() + 60
        while {citus.get_run(i).status for i in (tree, calls)} != {"done"}:
            assert time.monotonic() < deadline, "the runs did not finish in 60 s"
            worker.run_until_idle()
            time.sleep(0.05)

    sent = _statements(life)
    coordinator = _port(CITUS_DSN)
    on_nodes = [text for port, text, _ in sent if port != coordinator]
    assert on_nodes, "claims go to the worker nodes"
    assert all(_SHARD.search(text) for text in on_nodes)
    assert not [t for t in on_nodes if _DISTRIBUTED.search(t)], "only shard tables on a node"
    offenders = []
    with _coordinator() as conn:
        conn.execute(f'SET search_path TO "{citus_schema}"')
        for _, text, params in (s for s in sent if s[0] == coordinator):
            if text.startswith(_FAN_OUT):
                continue
            # (parameters bound by the client: Citus plans an INSERT ... SELECT given as a
            # prepared statement's parameters only when it runs it)
            explain = psycopg.ClientCursor(conn).execute(f"EXPLAIN {text}", params)
            plan = "\n".join(r[0] for r in explain.fetchall())
            if "Task Count: 1\n" not in plan + "\n":
                offenders.append(f"{text}\n{plan}")
    assert len(sent) > 50
    assert not offenders, "\n\n".join(offenders)


def _port(dsn: str | None) -> int:
    assert dsn is not None
    return int(psycopg.conninfo.conninfo_to_dict(dsn).get("port") or 5432)


_DISTRIBUTED = re.compile(
    r"\bworkflow_(runs|effects|inbox|events|deliveries|calls|call_attempts|search|forks|"
    r"run_keys|key_tombstones|limits|capacity)\b"
)
_SHARD = re.compile(r"\bworkflow_[a-z_]+_\d+\b")
_FAN_OUT = (
    # `unknown_versions`: a worker's look every few seconds for runs of definitions it does
    # not have (docs/citus.md), not a statement of any run's life
    "SELECT workflow_name, workflow_version, count(*), snapshot->>'version' FROM workflow_runs",
    # a keyed start's look for the key's run when no top-level run ever had the key (a child
    # run's key, `<parent key>/<invoke id>`, is in no keys table: docs/citus.md)
    f"SELECT {CitusStore.RUN_COLUMNS} FROM workflow_runs WHERE workflow_name = %s AND key = %s "
    "ORDER BY created_at DESC, id LIMIT %s OFFSET %s",
)
_VERBS = ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH")


def _statements(work: Callable[[], None]) -> list[tuple[int, str, Any]]:
    """The statements `work()` sent that read or write the run tables: (server port, text,
    parameters)."""
    sent: list[tuple[int, str, Any]] = []
    execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany

    def record(cursor: Any, query: Any, params: Any) -> None:
        text = query.decode() if isinstance(query, bytes) else str(query)
        tables = _DISTRIBUTED.search(text) or _SHARD.search(text)
        if tables and "pg_dist_" not in text and text.lstrip().upper().startswith(_VERBS):
            sent.append((int(cursor.connection.info.port), text, params))

    def spy(cursor: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        record(cursor, query, params)
        return execute(cursor, query, params, **kw)

    def spy_many(cursor: Any, query: Any, rows: Any, **kw: Any) -> Any:
        rows = list(rows)
        if rows:  # (each row is one statement: the first stands for them)
            record(cursor, query, rows[0])
        return executemany(cursor, query, rows, **kw)

    psycopg.Cursor.execute = spy  # type: ignore[method-assign]
    psycopg.Cursor.executemany = spy_many  # type: ignore[method-assign]
    try:
        work()
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        psycopg.Cursor.executemany = executemany  # type: ignore[method-assign]
    return sent
