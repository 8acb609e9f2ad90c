"""Waiting for answers (docs/persistence.md, "Run lifecycle"): a send that waits for the step
that applied its event, and a wait for a run's end, on SQLite and PostgreSQL, against a real
worker process applying the events."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from persistence.cli import main
from persistence.lifecycle_cli import EXIT_CANCELLED, EXIT_DONE, EXIT_FAILED, EXIT_TIMEOUT
from persistence.runtime import Runtime
from persistence.stores import RunNotFoundError, Store, open_store
from persistence.stores.postgres import PostgresStore
from persistence.waiting import Answer, StillRunningError
from persistence.worker import Worker
from tests.persistence.conftest import Serve, stop_workers, wait_for
from tests.persistence.lifecycle_workflows import WORK_MS_ENV, tally

MACHINES = "tests.persistence.lifecycle_workflows"


def _worker(url: str, log: Path, work_ms: int = 0) -> subprocess.Popen[bytes]:
    env = {**os.environ, WORK_MS_ENV: str(work_ms)}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "persistence.cli",
            "worker",
            "--store",
            url,
            "--machines",
            MACHINES,
            "--poll-ms",
            "50",
            "--log-level",
            "WARNING",
        ],
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


@pytest.fixture
def url(crash_url: str) -> Iterator[str]:
    """A fresh migrated database (SQLite file, PostgreSQL schema)."""
    store = open_store(crash_url, check=False)
    store.migrate()
    store.close()
    yield crash_url


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    opened = open_store(url)
    yield opened
    opened.close()


def _cli(*argv: str) -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(list(argv))
    return code, orjson.loads(out.getvalue().strip().splitlines()[-1])


def test_sends_that_wait_get_the_step_that_applied_their_own_event_from_a_worker_process(
    url: str,
    store: Store,
    tmp_path: Path,
) -> None:
    """Events queued while a worker process is busy with the run (each ADD from idle runs a
    200 ms call) are applied later, several per step; each waiting sender gets the step that
    applied *its* event, as the journal shows it, not merely the run's next state."""
    runtime = Runtime(store, [tally], step_in_send=False)  # (every event queued for a worker)
    run = runtime.start("tally", {"customer": 1})
    worker = _worker(url, tmp_path / "worker.log", work_ms=200)
    answers: dict[int, Answer] = {}
    try:
        first = runtime.send(run, {"type": "ADD", "n": 1}, wait=60)
        assert first.status == "applied" and first.state == "working"

        def send(n: int) -> None:
            answers[n] = runtime.send(run, {"type": "ADD", "n": n}, wait=60)

        senders = [threading.Thread(target=send, args=(n,)) for n in range(2, 12)]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join(90)
        code, printed = _cli(
            "runs",
            "send",
            "--store",
            url,
            "--machines",
            MACHINES,
            run,
            "--event",
            '{"type": "ADD", "n": 100}',
            "--wait",
            "60s",
        )
    finally:
        stop_workers([worker])
    assert all(a.status == "applied" for a in answers.values())
    journal = {(e.event.get("n"), e.event["type"]): e for e in store.list_events(run)}
    for n, answer in answers.items():
        entry = journal[(n, "ADD")]
        assert (answer.step, answer.state) == (entry.step, entry.state_after)
        assert answer.step is not None and answer.run.version >= answer.step
        if answer.exact:  # the row as that step left it: this event's n is counted
            assert answer.run.snapshot["context"]["count"] >= 1 + n
    assert code == EXIT_DONE and printed["outcome"] == "applied"
    assert printed["step"] == journal[(100, "ADD")].step
    assert store.get_run(run).snapshot["context"]["count"] == sum(range(1, 12)) + 100


def test_a_send_that_waits_longer_than_the_run_takes_stays_queued_and_says_so(
    url: str,
    store: Store,
) -> None:
    """No worker runs: the event is still queued when the wait elapses (`queued`, the run as
    it is; `runs send --wait` exits 124); a worker applies it later."""
    runtime = Runtime(store, [tally], step_in_send=False)
    run = runtime.start("tally", {"customer": 1})
    answer = runtime.send(run, "MOVE", wait=0.2)
    assert (answer.status, answer.step, answer.run.state) == ("queued", None, "idle")
    code, printed = _cli(
        "runs",
        "send",
        "--store",
        url,
        "--machines",
        MACHINES,
        run,
        "--event",
        "MOVE",
        "--wait",
        "200ms",
    )
    assert code == EXIT_TIMEOUT and printed["outcome"] == "queued"
    assert [e.id for e in store.pending_events(run)] == [answer.inbox_id, printed["inbox_id"]]


def test_an_event_applied_in_the_send_answers_with_its_step(store: Store) -> None:
    runtime = Runtime(store, [tally])
    run = runtime.start("tally", {"customer": 1, "region": "eu"})
    answer = runtime.send(run, {"type": "MOVE", "region": "us"}, wait=5)
    assert (answer.status, answer.step, answer.state, answer.exact) == ("applied", 2, "idle", True)
    assert answer.run.snapshot["context"]["region"] == "us"


def test_an_event_the_run_ends_before_applying_is_dead(store: Store) -> None:
    runtime = Runtime(store, [tally], step_in_send=False)
    run = runtime.start("tally", {"customer": 1})
    inbox_id = runtime.send(run, "MOVE")
    assert runtime.cancel(run, "closed") == "cancelled"
    answer = runtime.wait_for_event(run, inbox_id, 5)
    assert answer.status == "dead" and "cancelled" in (answer.reason or "")


def test_waits_for_runs_that_end_done_failed_cancelled_or_not_in_time(
    url: str,
    store: Store,
    tmp_path: Path,
) -> None:
    """`Runtime.wait` and `runs wait` return when a worker process ends the run: its output
    (done) or error, with distinct exit codes; a run still active when the timeout elapses
    raises `StillRunningError` (exit 124)."""
    runtime = Runtime(store, [tally], step_in_send=False)
    done, failed, cancelled, idle = (runtime.start("tally", {"customer": i}) for i in range(4))
    worker = _worker(url, tmp_path / "worker.log")
    results: dict[str, Any] = {}
    try:

        def wait(run_id: str) -> None:
            results[run_id] = runtime.wait(run_id, 60)

        waiters = [threading.Thread(target=wait, args=(r,)) for r in (done, failed)]
        for waiter in waiters:
            waiter.start()
        runtime.send(done, {"type": "ADD", "n": 3})
        runtime.send(done, "FINISH")
        runtime.send(failed, "BREAK")
        for waiter in waiters:
            waiter.join(90)
        cli_done = _cli("runs", "wait", "--store", url, done[:8], "--timeout", "30s")
        cli_failed = _cli("runs", "wait", "--store", url, failed, "--timeout", "30s")
        runtime.cancel(cancelled, "not needed")
        cli_cancelled = _cli("runs", "wait", "--store", url, cancelled, "--timeout", "30s")
        with pytest.raises(StillRunningError) as timed_out:
            runtime.wait(idle, 0.3)
        cli_idle = _cli("runs", "wait", "--store", url, idle, "--timeout", "300ms")
    finally:
        stop_workers([worker])
    assert (results[done].status, results[done].output) == ("done", {"count": 3})
    assert results[failed].status == "error"
    assert "exploded on purpose" in str(results[failed].error)
    assert timed_out.value.run.id == idle and timed_out.value.run.status == "active"
    assert cli_done == (
        EXIT_DONE,
        {
            "run_id": done,
            "status": "done",
            "state": "finished",
            "output": {"count": 3},
            "error": None,
        },
    )
    assert cli_failed[0] == EXIT_FAILED and cli_failed[1]["status"] == "error"
    assert cli_cancelled[0] == EXIT_CANCELLED
    assert cli_cancelled[1]["error"] == {"name": "RunCancelled", "message": "not needed"}
    assert cli_idle == (
        EXIT_TIMEOUT,
        {"run_id": idle, "status": "active", "state": "idle", "timeout": True},
    )


def test_on_postgres_a_waiter_reads_once_per_step_of_its_run_not_on_a_timer(
    pg_dsn: str,
    pg_schema: str,
    tmp_path: Path,
) -> None:
    """The waiter is counted in its run's row while it waits (and not after); each step of
    its run, written by another process, NOTIFYs it: it reads the run when it starts (a first
    look, then to watch it and look again) and once per step after, however long the run
    takes, never on a timer.
    The run is named in upper case: the waiter follows it as the store spells it."""
    url = f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}schema={pg_schema}"
    setup = open_store(url, check=False)
    setup.migrate()
    setup.close()
    reads: list[str] = []

    class Counting(PostgresStore):
        def get_run(self, run_id: str) -> Any:
            reads.append(run_id)
            return super().get_run(run_id)

    store = Counting(pg_dsn, schema=pg_schema)
    other = open_store(url)
    try:
        runtime = Runtime(store, [tally], step_in_send=False)
        run = runtime.start("tally", {"customer": 1})
        worker = _worker(url, tmp_path / "worker.log")
        try:
            waiter = threading.Thread(target=lambda: runtime.wait(run.upper(), 60))
            waiter.start()
            _await_waiter(other, run)
            for event in ('{"type": "MOVE", "region": "a"}', "FINISH"):  # (a step each)
                sent = subprocess.run(  # (another process: its listener is not this one's)
                    [
                        sys.executable,
                        "-m",
                        "persistence.cli",
                        "runs",
                        "send",
                        "--store",
                        url,
                        "--machines",
                        MACHINES,
                        run,
                        "--event",
                        event,
                        "--wait",
                        "30s",
                    ],
                    capture_output=True,
                    timeout=60,
                )
                assert sent.returncode == EXIT_DONE, sent.stderr
            waiter.join(60)
            assert not waiter.is_alive()
        finally:
            stop_workers([worker])
        steps = store.get_run(run).version - 1
        waited_reads = len(reads) - 1  # (the last read, above, is the test's)
        assert 3 <= waited_reads <= 3 + steps  # (a look, finding it to watch, a read, one a step)
        assert _waiters(other, run) == 0
    finally:
        store.close()
        other.close()


def _waiters(store: Store, run_id: str) -> int:
    with store._connection() as conn:  # type: ignore[attr-defined]
        row = conn.execute("SELECT waiters FROM workflow_runs WHERE id = %s", (run_id,)).fetchone()
    return int(row[0])


def _await_waiter(store: Store, run_id: str) -> None:
    wait_for(lambda: _waiters(store, run_id) == 1, 30)


def test_the_ingress_answers_with_the_run_after_the_event_or_202_when_the_wait_elapses(
    store: Store,
    serve: Serve,
) -> None:
    """`?wait=` (or `Prefer: wait=`): `200` with the run after the event and the step that
    applied it; `202` with the run as it is, the event still queued, when the wait elapses
    (no worker yet); a worker applies it, and a later wait answers `200`."""
    from persistence.ingress import create_api

    base = serve(create_api(Runtime(store, [tally])))
    started = httpx.post(
        f"{base}/api/workflows/tally/runs", json={"key": "k1", "input": {"customer": 1}}
    )
    run = started.json()["id"]
    moved = httpx.post(f"{base}/api/runs/{run}/events?wait=5", json={"type": "ADD", "n": 2})
    assert moved.status_code == 200, moved.text
    assert (
        moved.json()
        | {
            "outcome": "applied",
            "applied_step": 2,
            "applied_state": "working",
            "state": "working",
            "version": 2,
        }
        == moved.json()
    )

    queued_api = serve(create_api(Runtime(store, [tally], step_in_send=False)))
    late = httpx.post(
        f"{queued_api}/api/workflows/tally/runs/k1/events",
        headers={"Prefer": "respond-async, wait=0.3"},
        json={"type": "FINISH"},
    )
    assert late.status_code == 202, late.text
    assert (
        late.json() | {"outcome": "queued", "applied_step": None, "version": 2, "status": "active"}
        == late.json()
    )
    worker = Worker(Runtime(store, [tally]), 1, poll_ms=20)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        ended = Runtime(store, [tally]).wait(run, 30)
    finally:
        worker.stop()
        thread.join(30)
    assert (ended.status, ended.output) == ("done", {"count": 2})
    refused = httpx.post(f"{base}/api/runs/{run}/events?wait=soon", json={"type": "ADD"})
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["query", "wait"]

    other = httpx.post(f"{base}/api/workflows/tally/runs", json={"key": "k2"}).json()["id"]
    for _ in range(2):  # a webhook delivered twice: queued once, both answered after its step
        worker = Worker(Runtime(store, [tally]), 1, poll_ms=20)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        try:
            posted = httpx.post(
                f"{base}/api/runs/{other}/events?wait=30",
                json={"type": "MOVE", "region": "eu"},
                headers={"Idempotency-Key": "d-1"},
            )
        finally:
            worker.stop()
            thread.join(30)
        assert posted.status_code == 200, posted.text
        assert (posted.json()["outcome"], posted.json()["applied_state"]) == ("applied", "idle")
    assert posted.json()["duplicate"] is True
    assert [e.event["type"] for e in store.list_events(other)] == ["MOVE"]


def test_waiting_for_an_unknown_run_or_for_too_long_is_refused(store: Store) -> None:
    runtime = Runtime(store, [tally])
    with pytest.raises(RunNotFoundError):
        runtime.wait("00000000-0000-4000-8000-000000000000", 1)
    run = runtime.start("tally", {"customer": 1})
    with pytest.raises(ValueError, match="timeout must be between 0 and 3600 seconds"):
        runtime.send(run, "MOVE", wait=-1)
    assert store.pending_events(run) == []  # (refused before anything was queued)
