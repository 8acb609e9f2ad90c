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

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.databases import DATABASE_PREFIX, reset_database, with_database
from benchmarks.durable_rows import STEPS, DurableRow, in_threads
from benchmarks.engine import ours_label

WORKFLOW = "three_steps"
PG_DATABASE = f"{DATABASE_PREFIX}_durable"
STEP_NAMES = ("add_one", "double", "minus_three")
RUNTIME = "batched worker, runs started then drained"
WORKER = "batched worker, backlog"
INLINE = "in the caller (Inline.run), 1 in flight per client"
WOKEN = "idle worker in the process, handed each start's call, 1 in flight"
REPLAYED = "its statements replayed by psycopg alone, 1 in flight (the database's part)"
LATENCY = "one step, send to committed state (idle worker)"
LATENCY_QUEUED = "one step, queued for the idle worker (step_in_send=False)"
LATENCY_EVENTS = 300
LATENCY_WARM_UP = 20
"""Steps taken before the latency rows' timed ones (and writes before their floor's)."""
STEP_GAP_S = 0.002
"""The pause before each step of the latency rows (`idle_worker_steps`) and of the floor
under them (`benchmarks.durable`'s one-row UPDATEs alone): long enough for the worker to be
waiting for work again."""
ENCRYPTED_WORKER = "AES-GCM payloads, backlog drained by the batched worker"
ENCRYPTED_RUNTIME = "AES-GCM payloads, runs started then drained by the batched worker"
ENCRYPTED_INLINE = "AES-GCM payloads, 1 in flight per client in the caller"
"""The encrypted variants of `WORKER`, `RUNTIME` and `INLINE` (`encrypted=True`): every
payload sealed with a key ring (`persistence.stores.codec`). Worded apart from the plain
subjects, which the goals find by substring."""
PLAIN_OF = {ENCRYPTED_WORKER: WORKER, ENCRYPTED_RUNTIME: RUNTIME, ENCRYPTED_INLINE: INLINE}


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


def measure_postgres(
    dsn: str, backend: str, workers: int, n: int, repeat: int, encrypted: bool = False
) -> list[DurableRow]:
    """The 3-step workflow on PostgreSQL, in a database of its own (recreated per run), with
    the database's transaction count per workflow (every autocommit statement counts); with
    `encrypted`, every payload sealed (`ENCRYPTED_RUNTIME`, `ENCRYPTED_WORKER`)."""
    try:
        return _measure(
            partial(_fresh_database, dsn), backend, workers, n, repeat, _transactions, encrypted
        )
    finally:
        reset_database(dsn, PG_DATABASE)


def _fresh_database(dsn: str) -> str:
    """The URL of `PG_DATABASE` on the server of `dsn`, dropped and created empty (so its
    transaction counter shows what the measured runs cost)."""
    import psycopg

    reset_database(dsn, PG_DATABASE)
    with psycopg.connect(with_database(dsn, "postgres"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {PG_DATABASE}")
    return with_database(dsn, PG_DATABASE)


def _transactions(url: str) -> int:
    """Transactions committed so far in the database of ``url`` (pg_stat_database)."""
    import psycopg

    time.sleep(0.6)  # closed sessions report their counts when they exit
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


def measure_sqlite(
    directory: Path, backend: str, workers: int, n: int, repeat: int, encrypted: bool = False
) -> list[DurableRow]:
    """The 3-step workflow on a new SQLite file (WAL, ``synchronous=full``) per run."""
    return _measure(
        lambda: f"sqlite:///{directory / f'runs-{uuid.uuid4().hex[:8]}.db'}",
        backend,
        workers,
        n,
        repeat,
        encrypted=encrypted,
    )


def inline_postgres(
    dsn: str, backend: str, clients: int, n: int, encrypted: bool = False
) -> list[DurableRow]:
    """One run of the equal-concurrency rows on PostgreSQL: `clients` threads each running
    workflows one at a time in the caller (`Inline.run`, as DBOS runs them), and (one client,
    not `encrypted`) a client starting runs one at a time for an idle worker to pick up; with
    transactions per workflow from pg_stat_database."""
    try:
        return _in_flight(
            partial(_fresh_database, dsn), backend, clients, n, _transactions, encrypted
        )
    finally:
        reset_database(dsn, PG_DATABASE)


def replayed_postgres(dsn: str, backend: str, n: int) -> DurableRow:
    """The database's part of the one-in-flight row: the statements one `Inline.run` sent
    (recorded at `psycopg.Cursor.execute`), sent again `n` times over by psycopg alone, each
    time for a new run id, on one connection with a cursor per statement (prepared by the
    server, as the store's are); no engine, runtime or store in the client. Every replayed
    run is checked to have ended."""
    import psycopg

    try:
        url = _fresh_database(dsn)
        recorded_id, statements = _statements_of_one_workflow(url)
        with psycopg.connect(url, autocommit=True) as conn:
            cursors = [conn.cursor() for _ in statements]
            ids = [str(uuid.uuid4()) for _ in range(20 + n)]
            sends = [
                [
                    (cursor, query, _with_run_id(params, recorded_id, run_id), binary)
                    for cursor, (query, params, binary) in zip(cursors, statements)
                ]
                for run_id in ids
            ]
            for cursor, query, params, binary in (s for sent in sends[:20] for s in sent):
                cursor.execute(query, params, binary=binary)  # warm-up: the server prepares
            began = time.perf_counter()
            for cursor, query, params, binary in (s for sent in sends[20:] for s in sent):
                cursor.execute(query, params, binary=binary)
            seconds = time.perf_counter() - began
            ended = conn.execute(
                "SELECT count(*) FROM workflow_runs WHERE status = 'done' AND id = ANY(%s::uuid[])",
                (ids,),
            ).fetchone()
        assert ended is not None and ended[0] == len(ids), f"{ended} of {len(ids)} runs ended"
        return DurableRow(
            backend, 1, f"{ours_label()} {REPLAYED}", "workflows/s", STEPS, n, (n / seconds,)
        )
    finally:
        reset_database(dsn, PG_DATABASE)


def _statements_of_one_workflow(url: str) -> tuple[str, list[tuple[Any, Any, bool]]]:
    """The run id and (query, parameters, binary) of each statement one `Inline.run` of the
    workflow sends, after a warm-up."""
    import psycopg

    from persistence import open_store
    from persistence.inline import Inline
    from persistence.runtime import Runtime

    sent: list[tuple[Any, Any, bool]] = []
    execute = psycopg.Cursor.execute

    def recorded(cursor: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        sent.append((query, params, bool(kwargs.get("binary"))))
        return execute(cursor, query, params, **kwargs)

    with _runtime(open_store(url, migrate=True), Runtime, three_steps_machine()) as runtime:
        inline = Inline(runtime)
        _inline_clients(inline, 1, 20, 10**6)
        psycopg.Cursor.execute = recorded  # type: ignore[method-assign]
        try:
            run_id = inline.run(WORKFLOW, {"x": 1}).run_id
        finally:
            psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    return run_id, sent


def _with_run_id(value: Any, recorded: str, run_id: str) -> Any:
    """`value` (a statement's parameters) with the recorded run's id replaced by `run_id`
    wherever it appears (the store sends ids, keys and JSON documents as text)."""
    if isinstance(value, str):
        return value.replace(recorded, run_id)
    if isinstance(value, dict):
        return {k: _with_run_id(v, recorded, run_id) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_with_run_id(v, recorded, run_id) for v in value)
    return value


def inline_sqlite(
    directory: Path, backend: str, clients: int, n: int, encrypted: bool = False
) -> list[DurableRow]:
    """`inline_postgres` on a new SQLite file (WAL, ``synchronous=full``)."""
    return _in_flight(
        lambda: f"sqlite:///{directory / f'inline-{uuid.uuid4().hex[:8]}.db'}",
        backend,
        clients,
        n,
        encrypted=encrypted,
    )


def _in_flight(
    make_url: Any,
    backend: str,
    clients: int,
    n: int,
    transactions: Any = None,
    encrypted: bool = False,
) -> list[DurableRow]:
    """The rows with a fixed number of workflows in flight (one per client thread).

    Transactions are counted between stores that are closed: a PostgreSQL session reports
    its counts to `pg_stat_database` in its own time (up to seconds later while it idles), and
    at the latest when it exits, so counting around open sessions miscounts both ways."""
    from persistence import open_store
    from persistence.inline import Inline
    from persistence.runtime import Runtime

    machine = three_steps_machine()
    url = make_url()
    with _runtime(open_store(url, migrate=True), Runtime, machine, encrypted) as runtime:
        _inline_clients(Inline(runtime), clients, 20, 10**6)  # warm-up
    before = transactions(url) if transactions else 0
    with _runtime(open_store(url), Runtime, machine, encrypted) as runtime:
        seconds = _inline_clients(Inline(runtime), clients, n, 0)
    tx = _per_workflow(transactions, url, before, n)
    subject = ENCRYPTED_INLINE if encrypted else INLINE
    rows = [
        DurableRow(
            backend,
            clients,
            f"{ours_label()} {subject}",
            "workflows/s",
            STEPS,
            n,
            (n / seconds,),
            transactions=tx,
        )
    ]
    if clients == 1 and not encrypted:
        rows.append(_woken(url, backend, machine, n, transactions))
    return rows


def _woken(url: str, backend: str, machine: Any, n: int, transactions: Any) -> DurableRow:
    """A client starting runs one at a time for an idle worker (in this process) to step: each
    start hands the run's first call to the worker's call executor (`Runtime.attach_executor`)."""
    from persistence import open_store
    from persistence.runtime import Runtime
    from persistence.worker import Worker

    def serve(count: int, offset: int) -> tuple[float, list[str]]:
        finished = finished_telemetry()
        store = open_store(url)
        try:
            runtime = Runtime(store, machines=[machine], telemetry=finished)
            worker = Worker(runtime, concurrency=1)
            thread = threading.Thread(target=worker.run, name="bench-worker")
            thread.start()
            try:
                t0 = time.perf_counter()
                ids = []
                for i in range(count):
                    ids.append(runtime.start(WORKFLOW, input={"x": offset + i}))
                    finished.wait_for(ids[-1])
                seconds = time.perf_counter() - t0
            finally:
                worker.stop()
                thread.join()
        finally:
            store.close()
        return seconds, ids

    serve(20, 10**6)  # warm-up
    before = transactions(url) if transactions else 0
    seconds, ids = serve(n, 0)
    tx = _per_workflow(transactions, url, before, n)
    with _runtime(open_store(url), Runtime, machine) as runtime:  # after the count: reads count
        check_outputs(runtime, ids, 0)
    return DurableRow(
        backend,
        1,
        f"{ours_label()} {WOKEN}",
        "workflows/s",
        STEPS,
        n,
        (n / seconds,),
        "the worker in this process",
        transactions=tx,
    )


def _per_workflow(transactions: Any, url: str, before: int, n: int) -> tuple[float, ...]:
    """Database transactions per workflow since `before` (none where not counted)."""
    return ((transactions(url) - before) / n,) if transactions else ()


def _inline_clients(inline: Any, clients: int, n: int, offset: int) -> float:
    """`n` workflows through `inline.run`, split over `clients` threads each running one at a
    time; wall seconds. Every output is checked."""
    per_client = n // clients

    def client(c: int) -> None:
        for x in range(offset + c * per_client, offset + (c + 1) * per_client):
            got = inline.run(WORKFLOW, {"x": x})
            assert got.status == "done" and got.output == expected(x), (got, expected(x))

    return in_threads(clients, client)


def finished_telemetry() -> Any:
    """Telemetry that tells a waiting client when a run's step committed (in this process):
    how the benchmark sees "done" without polling the database."""
    from persistence.telemetry import Telemetry

    class Finished(Telemetry):
        def __init__(self) -> None:
            super().__init__(tracing=False)
            self.changed = threading.Condition()
            self.committed: dict[str, tuple[str, float]] = {}

        def end_step(self, run: Any, before: str, commit: Any, version: Any) -> None:
            super().end_step(run, before, commit, version)
            if commit is not None and version is not None:
                with self.changed:
                    self.committed[run.id] = (commit.status, time.perf_counter())
                    self.changed.notify_all()

        def wait_for(self, run_id: str, status: str | None = None, timeout: float = 30.0) -> float:
            """Until `run_id` committed a step (one ending it, unless `status` is given);
            when that commit returned (perf_counter seconds)."""

            def seen() -> bool:
                got = self.committed.get(run_id)
                return got is not None and (
                    got[0] != "active" if status is None else got[0] == status
                )

            with self.changed:
                if not self.changed.wait_for(seen, timeout):
                    raise TimeoutError(f"run {run_id} did not commit within {timeout}s")
                return self.committed.pop(run_id)[1]

    return Finished()


def idle_worker_steps(
    store: Any,
    events: int,
    before_send: Callable[[], None] = lambda: None,
    *,
    step_in_send: bool = True,
) -> Iterator[tuple[float, float]]:
    """One counter run with an idle worker: `send` of an event whose transition runs an
    `assign`, `events` times after `LATENCY_WARM_UP` steps, `STEP_GAP_S` apart so the worker
    waits for each; yields (`perf_counter` before the send, when the step's commit returned)
    per step. The run is at rest before each send, so the send applies the event itself; with
    `step_in_send=False` every event is queued and the worker steps it."""
    from persistence.runtime import Runtime
    from persistence.worker import Worker
    from statecharts import assign, create_machine

    machine = create_machine(
        {
            "id": "counter",
            "initial": "counting",
            "context": {"n": 0},
            "states": {"counting": {"on": {"INC": {"actions": "inc"}}}},
        },
        actions={"inc": assign({"n": lambda context, event: context["n"] + 1})},
    )
    finished = finished_telemetry()
    runtime = Runtime(store, machines=[machine], telemetry=finished, step_in_send=step_in_send)
    run_id = runtime.start("counter")
    worker = Worker(runtime, concurrency=1)
    thread = threading.Thread(target=worker.run, name="bench-worker")
    thread.start()
    try:
        for i in range(events + LATENCY_WARM_UP):
            time.sleep(STEP_GAP_S)  # the worker is idle, waiting for work
            before_send()
            t0 = time.perf_counter()
            runtime.send(run_id, "INC")
            done = finished.wait_for(run_id, "active")
            if i >= LATENCY_WARM_UP:
                yield t0, done
    finally:
        worker.stop()
        thread.join()
    assert runtime.get(run_id).snapshot["context"]["n"] == events + LATENCY_WARM_UP


def step_latency(
    url: str, backend: str, events: int = LATENCY_EVENTS, *, step_in_send: bool = True
) -> DurableRow:
    """One durable step with an idle worker (`idle_worker_steps`), until the commit of the
    new state returned; p50 and p99 in the note, the rate of such steps one after another as
    the median."""
    from persistence import open_store

    store = open_store(url, migrate=True)
    try:
        latencies = [
            done - t0 for t0, done in idle_worker_steps(store, events, step_in_send=step_in_send)
        ]
    finally:
        store.close()
    subject = LATENCY if step_in_send else LATENCY_QUEUED
    return latency_row(backend, f"{ours_label()} {subject}", latencies)


def latency_row(backend: str, subject: str, latencies: list[float]) -> DurableRow:
    """A latency row from the seconds each step took: p50 as the median, p99 beside it (ms)."""
    ordered = sorted(latencies)
    p50, p99 = ordered[len(ordered) // 2], ordered[int(len(ordered) * 0.99)]
    return DurableRow(backend, 1, subject, "ms", 1, len(ordered), (p50 * 1000,), p99=(p99 * 1000,))


def _measure(
    make_url: Any,
    backend: str,
    workers: int,
    n: int,
    repeat: int,
    transactions: Any = None,
    encrypted: bool = False,
) -> list[DurableRow]:
    """Two rows from the same runs: starts and steps together (``RUNTIME``, comparable with
    DBOS, whose workflows/s include the start), and the workers alone (``WORKER``: the steps
    committed per second of the workers' time, the runs started beforehand)."""
    labels = (
        (f"{ours_label()} {ENCRYPTED_RUNTIME}", f"{ours_label()} {ENCRYPTED_WORKER}")
        if encrypted
        else (f"{ours_label()} {RUNTIME}", f"{ours_label()} {WORKER}")
    )
    try:
        from persistence import open_store
        from persistence.runtime import Runtime
        from persistence.worker import Worker
    except ImportError as exc:
        return [
            DurableRow(
                backend,
                workers,
                label,
                "workflows/s",
                STEPS,
                n,
                (),
                note=f"skipped: persistence runtime not available ({exc})",
            )
            for label in labels
        ]
    machine = three_steps_machine()
    rates: list[float] = []
    worker_rates: list[float] = []
    per_workflow: list[float] = []
    for _ in range(repeat):
        url = make_url()
        with _runtime(open_store(url, migrate=True), Runtime, machine, encrypted) as runtime:
            ids = drive(runtime, Worker, workers, 5, offset=10**6)[2]  # warm-up
            check_outputs(runtime, ids, offset=10**6)
        before = transactions(url) if transactions else 0
        with _runtime(open_store(url), Runtime, machine, encrypted) as runtime:
            rate, worker_rate, ids = drive(runtime, Worker, workers, n, offset=0)
        if transactions:
            per_workflow.append((transactions(url) - before) / n)
        with _runtime(open_store(url), Runtime, machine, encrypted) as runtime:
            check_outputs(runtime, ids, offset=0)
        rates.append(rate)
        worker_rates.append(worker_rate)
    return [
        DurableRow(
            backend,
            workers,
            labels[0],
            "workflows/s",
            STEPS,
            n,
            tuple(rates),
            "16 runs per round, one commit per round",
            transactions=tuple(per_workflow),
        ),
        DurableRow(
            backend,
            workers,
            labels[1],
            "workflows/s",
            STEPS,
            n,
            tuple(worker_rates),
            "runs started beforehand; time of the workers only",
        ),
    ]


BENCH_KEYS = (("bench", bytes(range(32))),)
"""The key ring of the encrypted rows (a fixed AES-256 key: a benchmark's, no secret)."""


@contextmanager
def _runtime(store: Any, runtime_cls: Any, machine: Any, encrypted: bool = False) -> Iterator[Any]:
    """A runtime of `machine` on `store` (its payloads sealed if `encrypted`), closed after."""
    try:
        codec = None
        if encrypted:
            from persistence.stores.codec import KeyRing

            codec = KeyRing(list(BENCH_KEYS))
        yield runtime_cls(store, machines=[machine], codec=codec)
    finally:
        store.close()


def drive(
    runtime: Any, worker_cls: Any, workers: int, n: int, offset: int
) -> tuple[float, float, list[str]]:
    """Start ``n`` runs from ``workers`` client threads, then let a served worker with
    ``workers`` run threads (default settings otherwise) finish them: workflows/s over both,
    workflows/s over the worker's part, and the run ids."""
    t0 = time.perf_counter()
    ids = start_all(runtime, n, workers, offset)
    t1 = time.perf_counter()
    # served as in production (`Worker.run`): its call executor runs the calls beside their
    # runs and writes bursts of their ends (`run_until_idle` runs them one at a time)
    _run_threads_until_done(runtime, worker_cls(runtime, concurrency=workers, poll_ms=5), ids)
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
