"""This project's durable runtime on the 3-step workflow (the durable benchmark's own subject).

The workflow: three invoked steps (``add_one``, ``double``, ``minus_three``), each step's result
assigned into the context and so persisted with the run, then a final state whose output is the
last result: the computation of ``benchmarks.dbos_workflow``. One measured run: ``n`` workflows
are started with ``Runtime.start`` from as many client threads as there are worker threads (as
DBOS's clients start theirs), then a ``Worker(runtime, concurrency=N)`` with default settings
drives them until all are terminal, and every run's status and output are checked afterwards.
Two rates come from each run: over starts and steps together (DBOS's time covers its workflow
start too), and over the worker's part alone (the durable transitions per second of the
workers). Stores: PostgreSQL in a database of its own (recreated for each run, so its
transaction counter shows what one workflow costs) and SQLite files; both through
``persistence.open_store``.

If the ``persistence`` package is not importable (it is built on another branch), the rows are
marked "skipped" with the import error.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.durable import STEPS, DurableRow
from benchmarks.engine import ours_label

WORKFLOW = "three_steps"
PG_DATABASE = "statecharts_bench_durable"
STEP_NAMES = ("add_one", "double", "minus_three")
RUNTIME = "durable runtime"
WORKER = "durable worker"


def add_one(x: int) -> int:
    """Step 1."""
    return x + 1


def double(x: int) -> int:
    """Step 2."""
    return x * 2


def minus_three(x: int) -> int:
    """Step 3."""
    return x - 3


def expected(x: int) -> int:
    """The workflow's output for input ``{"x": x}``."""
    return minus_three(double(add_one(x)))


def three_steps_machine() -> Any:
    """The 3-step workflow as a machine: one state per invoked step, results in the context."""
    from statecharts import assign, create_machine

    states: dict[str, Any] = {}
    for i, step in enumerate(STEP_NAMES):
        following = STEP_NAMES[i + 1] if i + 1 < len(STEP_NAMES) else "finished"
        states[step] = {
            "invoke": {
                "id": step,
                "src": step,
                "input": lambda context, event: context["x"],
                "onDone": {"target": following, "actions": "keep_result"},
            }
        }
    states["finished"] = {"type": "final"}
    return create_machine(
        {
            "id": WORKFLOW,
            "initial": STEP_NAMES[0],
            "context": lambda input: {"x": input["x"]},
            "states": states,
            "output": lambda context, event: context["x"],
        },
        actors={"add_one": add_one, "double": double, "minus_three": minus_three},
        actions={"keep_result": assign({"x": lambda context, event: event["output"]})},
    )


def measure_postgres(dsn: str, backend: str, workers: int, n: int,
                     repeat: int) -> list[DurableRow]:
    """The 3-step workflow on PostgreSQL, in a database of its own (recreated per run), with
    the database's transaction count per workflow (every autocommit statement counts)."""
    from benchmarks.durable import reset_database, with_database

    def fresh_url() -> str:
        import psycopg

        reset_database(dsn, PG_DATABASE)
        with psycopg.connect(with_database(dsn, "postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {PG_DATABASE}")
        return with_database(dsn, PG_DATABASE)

    try:
        return _measure(fresh_url, backend, workers, n, repeat, _transactions)
    finally:
        reset_database(dsn, PG_DATABASE)


def _transactions(url: str) -> int:
    """Transactions committed so far in the database of ``url`` (pg_stat_database)."""
    import psycopg

    time.sleep(0.6)  # closed sessions report their counts when they exit
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT xact_commit FROM pg_stat_database "
                           "WHERE datname = current_database()").fetchone()
    return int(row[0]) if row else 0


def measure_sqlite(directory: Path, backend: str, workers: int, n: int,
                   repeat: int) -> list[DurableRow]:
    """The 3-step workflow on a new SQLite file (WAL, ``synchronous=full``) per run."""
    return _measure(lambda: f"sqlite:///{directory / f'runs-{uuid.uuid4().hex[:8]}.db'}",
                    backend, workers, n, repeat)


def _measure(make_url: Any, backend: str, workers: int, n: int, repeat: int,
             transactions: Any = None) -> list[DurableRow]:
    """Two rows from the same runs: starts and steps together (``RUNTIME``, comparable with
    DBOS, whose workflows/s include the start), and the workers alone (``WORKER``: the steps
    committed per second of the workers' time, the runs started beforehand)."""
    labels = (f"{ours_label()} {RUNTIME}", f"{ours_label()} {WORKER}")
    try:
        from persistence import open_store
        from persistence.runtime import Runtime
        from persistence.worker import Worker
    except ImportError as exc:
        return [DurableRow(backend, workers, label, "workflows/s", STEPS, n, (),
                           note=f"skipped: persistence runtime not available ({exc})")
                for label in labels]
    machine = three_steps_machine()
    rates: list[float] = []
    worker_rates: list[float] = []
    per_workflow: list[float] = []
    for _ in range(repeat):
        url = make_url()
        with _runtime(open_store(url, migrate=True), Runtime, machine) as runtime:
            ids = drive(runtime, Worker, workers, 5, offset=10**6)[2]  # warm-up
            check_outputs(runtime, ids, offset=10**6)
        before = transactions(url) if transactions else 0
        with _runtime(open_store(url), Runtime, machine) as runtime:
            rate, worker_rate, ids = drive(runtime, Worker, workers, n, offset=0)
        if transactions:
            per_workflow.append((transactions(url) - before) / n)
        with _runtime(open_store(url), Runtime, machine) as runtime:
            check_outputs(runtime, ids, offset=0)
        rates.append(rate)
        worker_rates.append(worker_rate)
    note = (f"{statistics.median(per_workflow):.2f} database transactions per workflow"
            if per_workflow else "")
    return [DurableRow(backend, workers, labels[0], "workflows/s", STEPS, n, tuple(rates), note),
            DurableRow(backend, workers, labels[1], "workflows/s", STEPS, n,
                       tuple(worker_rates), "runs started beforehand; time of the workers only")]


@contextmanager
def _runtime(store: Any, runtime_cls: Any, machine: Any) -> Iterator[Any]:
    try:
        yield runtime_cls(store, machines=[machine])
    finally:
        store.close()


def drive(runtime: Any, worker_cls: Any, workers: int, n: int,
          offset: int) -> tuple[float, float, list[str]]:
    """Start ``n`` runs from ``workers`` client threads, then let a worker with ``workers``
    threads (default settings) finish them: workflows/s over both, workflows/s over the
    worker's part, and the run ids."""
    t0 = time.perf_counter()
    ids = start_all(runtime, n, workers, offset)
    t1 = time.perf_counter()
    if workers == 1:
        worker_cls(runtime, concurrency=1).run_until_idle()
    else:
        _run_threads_until_done(runtime, worker_cls(runtime, concurrency=workers, poll_ms=5),
                                ids)
    t2 = time.perf_counter()
    return n / (t2 - t0), n / (t2 - t1), ids


def start_all(runtime: Any, n: int, clients: int, offset: int) -> list[str]:
    """Start ``n`` runs from ``clients`` threads at once (as DBOS's clients start theirs);
    the run ids in input order."""
    ids: list[str] = [""] * n

    def client(c: int) -> None:
        for i in range(c, n, clients):
            ids[i] = runtime.start(WORKFLOW, input={"x": offset + i})

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if not all(ids):
        raise RuntimeError("a client thread failed to start its runs (see the error above)")
    return ids


def check_outputs(runtime: Any, ids: list[str], offset: int) -> None:
    """Every run finished with the workflow's output for its input."""
    for i, run_id in enumerate(ids):
        record = runtime.get(run_id)
        want = expected(offset + i)
        got = record.snapshot.get("output")
        assert record.status == "done" and got == want, (run_id, record.status, got, want)


def _run_threads_until_done(runtime: Any, worker: Any, ids: list[str]) -> None:
    """``worker.run()`` on its own thread until the last of ``ids`` is terminal, then stop."""
    thread = threading.Thread(target=worker.run, name="bench-worker")
    thread.start()
    try:
        for run_id in reversed(ids):  # started last, most likely to finish last
            while runtime.get(run_id).status == "active":
                time.sleep(0.005)
    finally:
        worker.stop()
        thread.join()
