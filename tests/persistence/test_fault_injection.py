"""Fault injection: bad values, rows, versions and events fed to real worker subprocesses on
SQLite and PostgreSQL. Each test counts how many times each side effect ran (the ledger, written
by the side effects themselves) and how many times each run was claimed (`claim_count`, counted
by the store in the claim statement), and checks that the other runs still finish.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from fastapi.testclient import TestClient
from msgspec import structs

from persistence.runtime import Runtime
from persistence.stores import (
    MAX_STORED_KEY_BYTES,
    NewRun,
    RunRecord,
    Store,
    StoreEncodingError,
    open_store,
)
from persistence.ui.app import create_app
from tests.persistence import faulty
from tests.persistence.conftest import handles_sigterm
from tests.persistence.workflows import LEDGER_ENV, init_ledger

ROOT = Path(__file__).resolve().parents[2]
LEASE_MS = 4000
TIMEOUT_S = 60.0


@dataclass
class Env:
    """One database (SQLite file or PostgreSQL schema), its ledger, and a store on it."""

    url: str
    kind: str
    ledger: str
    store: Store
    tmp: Path

    def runtime(self, machines: list[Any] | None = None) -> Runtime:
        # events are queued for the worker subprocesses the faults are fed to (a send to a run
        # at rest would apply them itself: tests/persistence/test_send_step.py)
        return Runtime(self.store, machines or faulty.MACHINES, step_in_send=False)

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> None:
        """Corrupt a row behind the store's back, as a bad deploy or a hand edit would."""
        if self.kind == "sqlite":
            with sqlite3.connect(self.url.split("///", 1)[1]) as db:
                db.execute(statement, params)
            return
        dsn, schema = self.url.rsplit("schema=", 1)
        with psycopg.connect(
            dsn.rstrip("?&"), autocommit=True, options=f"-c search_path={schema}"
        ) as db:
            db.execute(statement.replace("?", "%s"), params)

    def cli(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "persistence.cli", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT), LEDGER_ENV: self.ledger, **(env or {})},
        )


@pytest.fixture(params=["sqlite", "postgres"])
def e(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Env]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'runs.db'}"
    else:
        dsn = request.getfixturevalue("pg_dsn")
        url = f"{dsn}{'&' if '?' in dsn else '?'}schema={request.getfixturevalue('pg_schema')}"
    ledger = str(tmp_path / "ledger.db")
    init_ledger(ledger)
    monkeypatch.setenv(LEDGER_ENV, ledger)
    store = open_store(url, migrate=True)
    yield Env(url, request.param, ledger, store, tmp_path)
    store.close()


SERVING_LINE = " thread(s), store "
"""What a worker logs at INFO once its SIGTERM handler is installed (`Worker.run`)."""


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    log: Path
    log_level: str = "INFO"

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def started(self) -> bool:
        """Whether it is past its start (serving, or exited). SIGTERM kills a worker that is
        still importing (-15), and under load a start takes seconds. Serving is its SIGTERM
        handler (`handles_sigterm`); where /proc cannot tell, its INFO line, and without INFO
        lines the test has already waited for a line only a serving worker logs."""
        if self.process.poll() is not None:
            return True
        handles = handles_sigterm(self.process.pid)
        if handles is not None:
            return handles
        return self.log_level not in ("DEBUG", "INFO") or SERVING_LINE in self.text()


@contextmanager
def workers(
    e: Env,
    count: int = 2,
    threads: int = 2,
    extra: dict[str, str] | None = None,
    log_level: str = "INFO",
    machines: str = "tests.persistence.faulty",
    options: tuple[str, ...] = (),
) -> Iterator[list[Worker]]:
    """`count` worker processes with `threads` threads each (on `machines`, with more command
    line `options`); SIGTERMed (then killed) after."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), LEDGER_ENV: e.ledger, **(extra or {})}
    started = []
    for n in range(count):
        log = e.tmp / f"worker-{len(list(e.tmp.glob('worker-*.log')))}-{n}.log"
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "persistence.cli",
                "worker",
                "--store",
                e.url,
                "--machines",
                machines,
                "--concurrency",
                str(threads),
                "--batch",
                "4",
                "--lease-ms",
                str(LEASE_MS),
                "--poll-ms",
                "20",
                "--log-level",
                log_level,
                *options,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb"),
        )
        started.append(Worker(process, log, log_level))
    try:
        yield started
    finally:
        for w in started:
            if w.process.poll() is None:
                w.process.send_signal(signal.SIGTERM)
        for w in started:
            try:
                w.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.process.kill()
                w.process.wait(timeout=10)


def stop_cleanly(fleet: list[Worker]) -> None:
    """SIGTERM every worker; each must exit 0 (it was alive and healthy until then). A worker
    that had nothing to do may still be starting: wait until it serves (it can still die)."""
    for w in fleet:
        wait_until(w.started, "the worker started")
        assert w.process.poll() is None, f"worker died early:\n{w.text()[-3000:]}"
        w.process.send_signal(signal.SIGTERM)
    for w in fleet:
        assert exit_code(w, 30) == 0, w.text()[-3000:]


def exit_code(w: Worker, timeout_s: float) -> int:
    """The worker's exit status once it ends; a worker still running after `timeout_s` fails
    the test with its log and every thread's stack (SIGUSR1: `persistence.stacks`)."""
    try:
        return w.process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        w.process.send_signal(signal.SIGUSR1)
        time.sleep(1)
        w.process.kill()
        w.process.wait()
        pytest.fail(f"worker still running {timeout_s} s after SIGTERM:\n{w.text()[-6000:]}")


def wait_until(predicate: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout_s}s: {what}")
        time.sleep(0.05)


def ended(store: Store, ids: list[str]) -> Callable[[], bool]:
    return lambda: all(store.get_run(i).status != "active" for i in ids)


def settled(store: Store, ids: list[str]) -> Callable[[], bool]:
    """Ended with no effect left to run: a call's result step, taken beside the run, may end it
    (an `after 0` past an entry action) with that action left to a worker's claim."""
    return lambda: ended(store, ids)() and all(store.list_effects(i, "pending") == [] for i in ids)


def logs(fleet: list[Worker]) -> str:
    return "\n".join(w.text() for w in fleet)


# -- values -----------------------------------------------------------------------------------


def test_poison_values_fail_only_their_run_once_and_every_other_run_finishes(e: Env) -> None:
    runtime = e.runtime()
    kinds = [*faulty.POISONS, "assign"]
    poisoned = {kind: runtime.start("poison", {"kind": kind}) for kind in kinds}
    fine = [runtime.start("poison", {"kind": "fine"}) for _ in range(12)]
    with workers(e) as fleet:
        wait_until(ended(e.store, [*poisoned.values(), *fine]), "every run ended")
        time.sleep(1.0)  # long enough for a hot loop to show in the claim counts
        for kind, run_id in poisoned.items():
            run = e.store.get_run(run_id)
            assert run.status == "error", (kind, run)
            path = "context 'value'" if kind == "assign" else "context 'output"
            assert path in (run.last_error or ""), (kind, run.last_error)
            assert faulty.calls("produce", run_id) == 1, kind  # its effect never ran again
            assert faulty.calls("record", run_id) == 0, kind
            # its call ran beside the run: the run is claimed at most once (its failing step
            # is taken by a claim or by a wake-up that names it), never in a loop
            assert run.claim_count <= 1, (kind, run.claim_count)
            (attempt,) = e.store.call_attempts(run_id)  # attempted once, never again
            if kind == "assign":  # the output was fine; the step that assigned it failed
                assert attempt.outcome == "done", (kind, attempt)
            else:  # the output no store holds: the call failed, the machine got its error
                assert (attempt.outcome, attempt.error_name) == ("failed", "StoreEncodingError"), (
                    kind,
                    attempt,
                )
            assert [c.status for c in e.store.list_calls(run_id)] == [attempt.outcome]
        for run_id in fine:
            run = e.store.get_run(run_id)
            assert run.status == "done" and run.claim_count <= 1
            assert faulty.calls("produce", run_id) == faulty.calls("record", run_id) == 1
        stop_cleanly(fleet)
    text = logs(fleet)
    assert "Exception in thread" not in text and "Traceback" not in text
    for run_id in poisoned.values():  # one operator line per failed run, naming it
        lines = [line for line in text.splitlines() if f"run {run_id} failed" in line]
        assert len(lines) == 1 and "WARNING" in lines[0] and "workflow poison" in lines[0]
        assert "state producing" in lines[0] or "state recording" in lines[0]


def test_poison_in_sent_events_and_inputs_is_refused_before_anything_is_stored(e: Env) -> None:
    runtime = e.runtime()
    run_id = runtime.start("parked")
    before = e.store.count_runs()
    for bad in (2**64, "\ud800", "a\x00b", float("inf")):
        with pytest.raises(Exception, match="payload"):
            runtime.send(run_id, {"type": "GO", "payload": bad})
        with pytest.raises(Exception, match="input"):
            runtime.start("poison", {"kind": "fine", "extra": bad})
    with pytest.raises(ValueError, match=r"key .*NUL"):
        runtime.start("parked", key="order\x00-1")  # SQLite would keep it, PostgreSQL not
    assert e.store.pending_events(run_id) == [] and e.store.count_runs() == before


# -- rows -------------------------------------------------------------------------------------


def _garbage(e: Env, run_id: str) -> None:
    if e.kind == "sqlite":
        e.sql(
            "UPDATE workflow_runs SET snapshot = '{not json', created_at = 'yesterday' "
            "WHERE id = ?",
            (run_id,),
        )
    else:  # jsonb always parses; a snapshot that is not an object does not
        e.sql("UPDATE workflow_runs SET snapshot = '\"garbage\"'::jsonb WHERE id = ?", (run_id,))


def _unknown_state(e: Env, run: RunRecord) -> None:
    snapshot = orjson.dumps({**run.snapshot, "value": "nowhere"}).decode()
    cast = "" if e.kind == "sqlite" else "::jsonb"
    e.sql(f"UPDATE workflow_runs SET snapshot = ?{cast} WHERE id = ?", (snapshot, run.id))


def test_broken_rows_are_failed_once_listed_with_their_reason_and_isolated(e: Env) -> None:
    runtime = e.runtime()
    garbage, unknown = runtime.start("parked"), runtime.start("parked")
    healthy = [runtime.start("parked") for _ in range(6)]
    for run_id in (garbage, unknown, *healthy):
        runtime.send(run_id, "GO")  # queued events make every one of them claimable
    _garbage(e, garbage)
    _unknown_state(e, e.store.get_run(unknown))
    listed = {r.id: r for r in runtime.list()}  # lists, never fails, says what is wrong
    assert listed[garbage].problem is not None and "snapshot" in listed[garbage].problem
    with workers(e) as fleet:
        wait_until(ended(e.store, [garbage, unknown, *healthy]), "every run ended")
        time.sleep(1.0)
        g, u = e.store.get_run(garbage), e.store.get_run(unknown)
        assert (g.status, u.status) == ("error", "error")
        assert (g.last_error or "").startswith("row does not parse: snapshot")
        assert "snapshot does not restore" in (u.last_error or "") and "nowhere" in u.last_error
        assert (g.claim_count, u.claim_count) == (1, 1)  # failed at the claim, never again
        for broken in (g, u):  # each failure reported by the worker that claimed it
            assert f"run {broken.id} failed (workflow parked" in logs(fleet), logs(fleet)[-3000:]
        for broken in (g, u):
            assert faulty.calls("record", broken.id) == 0
            (letter,) = e.store.dead_letters(broken.id)  # the GO they never applied
            assert letter.event["type"] == "GO" and "ended (error)" in letter.reason
        for run_id in healthy:
            run = e.store.get_run(run_id)
            assert (run.status, run.claim_count, faulty.calls("record", run_id)) == ("done", 1, 1)
        stop_cleanly(fleet)
    listing = e.cli("runs", "list", "--store", e.url)
    assert (
        listing.returncode == 0
        and garbage in listing.stdout
        and "row does not parse" in listing.stdout
    )
    shown = e.cli("runs", "show", garbage, "--store", e.url)
    assert shown.returncode == 0, shown.stderr
    data = orjson.loads(shown.stdout)
    assert data["status"] == "error" and data["claim_count"] == 1
    assert [d["event"]["type"] for d in data["dead_letters"]] == ["GO"]
    client = TestClient(create_app(e.store, faulty.MACHINES))
    for path in ("/", "/api/runs", f"/runs/{garbage}", f"/api/runs/{garbage}", f"/runs/{unknown}"):
        assert client.get(path).status_code == 200, path
    api = client.get(f"/api/runs/{garbage}").json()
    assert api["dead_letters"][0]["reason"].startswith("the run ended (error)")
    assert "row does not parse" in client.get(f"/runs/{garbage}").text


def test_events_for_ended_runs_are_dead_letters_and_never_make_them_claimable(e: Env) -> None:
    runtime = e.runtime()
    done_run, cancelled = runtime.start("parked"), runtime.start("parked")
    runtime.send(done_run, "GO")
    runtime.send(cancelled, "GO")
    assert runtime.cancel(cancelled, "no longer needed") == "cancelled"
    (letter,) = e.store.dead_letters(cancelled)  # the GO it will never apply: kept, visible
    assert letter.reason == "the run ended (cancelled) before this event was applied"
    with workers(e, count=1) as fleet:
        wait_until(ended(e.store, [done_run]), "the run ended")
        time.sleep(1.0)
        stop_cleanly(fleet)
    run = e.store.get_run(done_run)
    assert (run.status, run.claim_count, faulty.calls("record", done_run)) == ("done", 1, 1)
    assert e.store.get_run(cancelled).claim_count == 0
    assert faulty.calls("record", cancelled) == 0
    # an event that slipped in as the run ended (inserted behind the store's back, as a send
    # racing the final step can on PostgreSQL): the worker's report sweeps it
    cast = "" if e.kind == "sqlite" else "::jsonb"
    now = "1" if e.kind == "sqlite" else "now()"
    e.sql(
        f"INSERT INTO workflow_inbox (run_id, event, created_at) VALUES (?, ?{cast}, {now})",
        (done_run, '{"type": "LATE"}'),
    )
    with workers(e, count=1) as fleet:
        wait_until(lambda: len(e.store.dead_letters(done_run)) == 1, "the late event swept")
        time.sleep(0.5)
        stop_cleanly(fleet)
    assert e.store.get_run(done_run).claim_count == 1  # never claimed for it
    assert "event 'LATE' dead-lettered" in logs(fleet)
    assert e.store.pending_events(done_run) == []
    shown = orjson.loads(e.cli("runs", "show", done_run, "--store", e.url).stdout)
    assert [d["event"]["type"] for d in shown["dead_letters"]] == ["LATE"]


def test_an_event_queued_before_its_deadline_wins_when_workers_come_back_late(e: Env) -> None:
    """Issue 47 R7: a payment queued while no worker runs (a deploy) and the run's deadline
    passing before any worker is back: the worker applies what happened first, the payment,
    not the overdue timer. Each run paid once, never lapsed, nothing dead-lettered, claimed
    once (before: the overdue timer fired first and the payment was dead-lettered)."""
    runtime = e.runtime()
    ids = []
    for _ in range(6):
        ids.append(runtime.start("deadline"))
        runtime.send(ids[-1], "PAY")  # queued at once, well before the deadline
    late = e.store.get_run(ids[-1]).created_at + faulty.DEADLINE_MS
    wait_until(lambda: runtime.clock.now() > late, "every deadline passed")
    with workers(e, count=2) as fleet:
        wait_until(settled(e.store, ids), "every run ended")
        stop_cleanly(fleet)
    runs = [e.store.get_run(i) for i in ids]
    assert [(r.status, r.state) for r in runs] == [("done", "paid")] * len(ids)
    assert [faulty.calls("record", i) for i in ids] == [1] * len(ids)
    assert faulty.calls("lapse") == 0
    assert [e.store.dead_letters(i) for i in ids] == [[]] * len(ids)
    assert [r.claim_count for r in runs] == [1] * len(ids)


# -- versions -----------------------------------------------------------------------------------


def test_a_version_without_migration_is_reported_and_never_claimed(e: Env) -> None:
    runtime = e.runtime()  # this process has version "1"
    old = [runtime.start("versioned") for _ in range(3)]
    for run_id in old:
        runtime.send(run_id, "GO")
    v3 = {faulty.VERSION_ENV: "3"}
    report = e.cli(
        "runs", "versions", "--store", e.url, "--machines", "tests.persistence.faulty", env=v3
    )
    assert report.returncode == 1 and "versioned" in report.stdout and "3 active" in report.stdout
    with workers(e, count=1, extra=v3, log_level="WARNING") as fleet:
        wait_until(lambda: "no definition or migration here" in logs(fleet), "reported")
        time.sleep(1.5)
        for run_id in old:  # not claimed, not failed, not looped on
            run = e.store.get_run(run_id)
            assert (run.status, run.claim_count, faulty.calls("record", run_id)) == ("active", 0, 0)
        stop_cleanly(fleet)
    assert logs(fleet).count("no definition or migration here") == 1  # reported, not looped
    with workers(e, count=1) as fleet:  # a worker with version "1" drains them
        wait_until(ended(e.store, old), "old runs drained")
        stop_cleanly(fleet)
    for run_id in old:
        run = e.store.get_run(run_id)
        assert (run.status, run.claim_count, faulty.calls("record", run_id)) == ("done", 1, 1)


# -- transient versus fatal -----------------------------------------------------------------


def test_a_transient_database_failure_rolls_back_and_is_picked_up_again(e: Env) -> None:
    runtime = e.runtime()
    run_id = runtime.start("transient", {"fails": 2})
    other = runtime.start("poison", {"kind": "fine"})
    seen: set[tuple[int, str]] = set()
    with workers(e) as fleet:

        def watch() -> bool:
            run = e.store.get_run(run_id)
            if run.status == "active" and run.last_error:
                seen.add((run.attempt_count, run.last_error.split(":")[0]))
            return run.status != "active"

        wait_until(watch, "the transient run ended")
        wait_until(ended(e.store, [other]), "the other run ended")
        stop_cleanly(fleet)
    run = e.store.get_run(run_id)
    assert (run.status, run.state) == ("done", "rejected")  # bad_write: onError, for real
    assert faulty.calls("db_write", run_id) == 3  # failed twice (rolled back), then wrote
    assert faulty.calls("bad_write", run_id) == 1  # not transient: its error path, once
    # the executor attempts the call again with its key; the run is never held for it
    assert run.claim_count <= 1
    assert (1, "transient failure (attempt 1)") in seen  # the attempt, visible on the row
    (write,) = [c for c in e.store.list_calls(run_id) if "writing" in c.call_id]
    assert (write.status, write.attempt) == ("done", 3)  # one call for the three attempts
    writes = [
        a for a in e.store.call_attempts(run_id) if a.idempotency_key == write.idempotency_key
    ]  # (each with the call's key)
    assert [(a.attempt, a.outcome, a.error_name) for a in writes] == [
        (1, "retrying", "Deadlock"),
        (2, "retrying", "Deadlock"),
        (3, "done", None),
    ]
    text = logs(fleet)
    assert "transient failure (attempt 2)" in text and "retry in" in text
    assert e.store.get_run(other).status == "done"


def test_transient_failures_that_persist_end_the_run_after_the_bounded_attempts(
    e: Env,
) -> None:
    from persistence.runtime import TransientBackoff
    from persistence.worker import Worker as InProcess

    runtime = Runtime(e.store, faulty.MACHINES, transient=TransientBackoff(1, 1, 3))
    run_id = runtime.start("transient", {"fails": 100})
    deadline = time.monotonic() + TIMEOUT_S
    while e.store.get_run(run_id).status == "active" and time.monotonic() < deadline:
        InProcess(runtime, lease_ms=LEASE_MS).run_until_idle()
        time.sleep(0.01)
    run = e.store.get_run(run_id)
    # after the bounded attempts the failure is the machine's: its onError ends it `failed`
    assert (run.status, run.state) == ("error", "failed"), run
    assert faulty.calls("db_write", run_id) == 3 and run.claim_count <= 1
    assert run.attempt_count == 3, "the row, the attempts and the calls agree"
    attempts = e.store.call_attempts(run_id)
    assert [(a.outcome, a.error_name) for a in attempts] == [("retrying", "Deadlock")] * 2 + [
        ("failed", "Deadlock")
    ]
    assert "(attempt 3)" in (attempts[-1].message or "")


# -- resume ----------------------------------------------------------------------------------


def test_failed_runs_resume_from_the_state_they_failed_in(e: Env) -> None:
    runtime = e.runtime()
    faulty.set_switch("broken", True)
    run_id = runtime.start("resumable")
    with workers(e, count=1) as fleet:
        wait_until(ended(e.store, [run_id]), "the call failed")
        stop_cleanly(fleet)
    run = e.store.get_run(run_id)
    assert run.status == "error" and "downstream is broken" in (run.last_error or "")
    # its call ran beside it: a claim or a wake-up naming the run took its failing step
    assert faulty.calls("fragile", run_id) == 1 and run.claim_count <= 1
    first_claims = run.claim_count
    faulty.set_switch("broken", False)  # the operator repairs the downstream, then resumes
    resumed = e.cli(
        "runs", "resume", run_id, "--store", e.url, "--machines", "tests.persistence.faulty"
    )
    assert resumed.returncode == 0 and "resumed in state calling" in resumed.stdout, resumed
    again = e.cli(
        "runs", "resume", run_id, "--store", e.url, "--machines", "tests.persistence.faulty"
    )
    assert again.returncode != 0 and "only failed runs resume" in again.stderr
    with workers(e, count=1) as fleet:
        wait_until(settled(e.store, [run_id]), "the resumed run ended")
        stop_cleanly(fleet)
    run = e.store.get_run(run_id)
    # one or two claims more: the action effect its reopened call's result leaves is run under
    # a claim, and the resume makes the run due at once, which a worker may claim before the
    # call (run beside it) has ended
    assert run.status == "done" and 1 <= run.claim_count - first_claims <= 2, run
    assert faulty.calls("fragile", run_id) == 2  # the failed call, made once more
    assert [a.outcome for a in e.store.call_attempts(run_id)] == ["failed", "done"]
    assert faulty.calls("fragile_action", run_id) == 1
    journal = [j.event["type"] for j in e.store.list_events(run_id)]
    assert journal.count("statecharts.resume") == 1


def test_a_failed_action_resumes_from_the_ui_button(e: Env) -> None:
    runtime = e.runtime()
    faulty.set_switch("action_broken", True)
    run_id = runtime.start("resumable")
    with workers(e, count=1) as fleet:
        wait_until(settled(e.store, [run_id]), "the action failed")
        stop_cleanly(fleet)
    run = e.store.get_run(run_id)
    assert run.status == "error", run
    assert "action 'fragile_action' raised Broken" in (run.last_error or "")
    faulty.set_switch("action_broken", False)
    client = TestClient(create_app(e.store, faulty.MACHINES))
    page = client.get(f"/runs/{run_id}").text
    token = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert 'id="resume"' in page and token is not None
    answer = client.post(
        f"/runs/{run_id}/resume", data={"csrf_token": token.group(1)}, follow_redirects=False
    )
    assert answer.status_code == 303
    with workers(e, count=1) as fleet:
        wait_until(settled(e.store, [run_id]), "the resumed run ended")
        stop_cleanly(fleet)
    run = e.store.get_run(run_id)
    assert (run.status, run.claim_count) == ("done", 2)
    assert faulty.calls("fragile_action", run_id) == 2 and faulty.calls("fragile", run_id) == 1
    assert [j.event["type"] for j in e.store.list_events(run_id)].count("statecharts.resume") == 1


# -- failure finals ---------------------------------------------------------------------------


def test_a_failure_final_ends_the_run_error_and_starts_its_error_workflow_once(e: Env) -> None:
    runtime = e.runtime()
    ids = [runtime.start("refund") for _ in range(3)]
    with workers(e) as fleet:
        wait_until(ended(e.store, ids), "the refunds ended")
        wait_until(lambda: e.store.count_runs().get("active", 0) == 0, "error workflows ended")
        time.sleep(0.5)
        stop_cleanly(fleet)
    for run_id in ids:
        run = e.store.get_run(run_id)
        assert (run.status, run.state, run.last_error) == ("error", "declined", "card declined")
        # (its call ran beside it: a claim or a wake-up naming the run took its failing step)
        assert run.failed_at is not None and run.claim_count <= 1
        assert faulty.calls("charge_card", run_id) == 1
        followers = [
            r
            for r in e.store.list_runs(workflow_name="refund_failed")
            if r.key == f"error-of:{run_id}"
        ]
        assert len(followers) == 1 and followers[0].status == "done"
        assert followers[0].claim_count <= 1
        assert [c.status for c in e.store.list_calls(followers[0].id)] == ["done"]
        assert faulty.calls("page_oncall", followers[0].id) == 1
    assert len(e.store.list_runs(workflow_name="refund_failed")) == 3
    client = TestClient(create_app(e.store, faulty.MACHINES))
    assert client.get("/api/runs", params={"status": "error"}).json()["total"] == 3


# -- a thread that dies -------------------------------------------------------------------------


def test_a_worker_whose_thread_dies_exits_non_zero(e: Env) -> None:
    runtime = e.runtime()
    healthy = runtime.start("poison", {"kind": "fine"})
    with workers(e, count=1, threads=1) as fleet:
        wait_until(ended(e.store, [healthy]), "a healthy run first")
        runtime.start("killer")
        (w,) = fleet
        try:
            code = w.process.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail("the worker kept running with a dead thread")
    assert code == 70, w.text()[-2000:]
    assert "died" in w.text() and "CRITICAL" in w.text()


# -- a value the store refuses, past the checks ---------------------------------------------------


def test_a_step_the_store_refuses_fails_only_its_run_and_its_batch_mates_commit(
    e: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    from persistence import planning
    from persistence.stores import StoreUnavailableError
    from persistence.worker import Worker as InProcess

    runtime = e.runtime()
    ids = [runtime.start("poison", {"kind": "fine"}) for _ in range(4)]
    victim = ids[1]
    unstorable: Any = {"bad": 2**70} if e.kind == "sqlite" else {"bad": "a\x00b"}
    original = planning.Planner.plan

    def plan(self: Any, x: Any, executed: Any, should_stop: Any) -> Any:
        planned = original(self, x, executed, should_stop)
        if isinstance(planned, planning.Plan) and x.run.id == victim:  # a value that slipped
            poisoned = {**planned.commit.snapshot, **unstorable}  # past every check
            planned = structs.replace(
                planned, commit=structs.replace(planned.commit, snapshot=poisoned)
            )
        return planned

    monkeypatch.setattr(planning.Planner, "plan", plan)  # (every step is planned there)
    outages = []
    original_commit = e.store.commit_steps

    def commit_steps(commits: Any, now: int, **kwargs: Any) -> Any:
        try:
            return original_commit(commits, now, **kwargs)
        except StoreUnavailableError as exc:  # pragma: no cover - the failure this rules out
            outages.append(exc)
            raise

    monkeypatch.setattr(e.store, "commit_steps", commit_steps)
    InProcess(runtime, batch=4, lease_ms=LEASE_MS).run_until_idle()
    assert not outages  # an encoding error is never taken for an outage
    bad = e.store.get_run(victim)
    assert bad.status == "error" and "the store refused its step" in (bad.last_error or "")
    assert e.store.list_effects(victim, "pending") == []  # its executed effect: recorded
    assert faulty.calls("produce", victim) == 1 and faulty.calls("record", victim) == 0
    assert bad.snapshot.get("bad") is None  # the stored snapshot is the last good one
    for run_id in ids:
        if run_id != victim:
            run = e.store.get_run(run_id)
            assert (run.status, run.claim_count, faulty.calls("record", run_id)) == (
                "done",
                0,
                1,
            )  # fmt: skip  (each step taken from rest by its call's end)
    assert bad.claim_count == 1  # its refused step left queued for a claim, which failed it


# -- upgrading a database that has the hot loop's rows ----------------------------------------


def test_upgrading_to_schema_2_turns_events_of_ended_runs_into_dead_letters(
    tmp_path: Path,
) -> None:
    """A database written by schema 1 code, with an ended run that still has a queued event
    (what made it claimable ~150 times a second), upgrades without losing anything."""
    from persistence import schema
    from persistence.stores.sqlite import _statements

    first = schema.migrations("sqlite")[0]
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        for statement in _statements(first.sql):
            db.execute(statement)
        db.execute(
            f"CREATE TABLE {schema.VERSION_TABLE} (version integer PRIMARY KEY, "
            "name text NOT NULL, applied_at text)"
        )
        db.execute(f"INSERT INTO {schema.VERSION_TABLE} VALUES (1, ?, '')", (first.name,))
        for run_id, status in (("ended", "error"), ("live", "active")):
            db.execute(
                "INSERT INTO workflow_runs (id, workflow_name, workflow_version, state, "
                "snapshot, status, created_at, updated_at) VALUES (?, 'parked', 'x', "
                "'waiting', '{}', ?, 1, 1)",
                (run_id, status),
            )
            db.execute(
                "INSERT INTO workflow_inbox (run_id, event, created_at) VALUES "
                '(?, \'{"type": "GO"}\', 1)',
                (run_id,),
            )
    store = open_store(f"sqlite:///{path}", migrate=True)
    try:
        assert store.schema_version() == schema.latest_version("sqlite")  # 2, then 3 (traces)
        (letter,) = store.dead_letters("ended")
        assert letter.reason == "the run had ended (error) before this event was applied"
        assert store.pending_events("ended") == [] and len(store.pending_events("live")) == 1
        assert store.get_run("ended").claim_count == 0
        claimed = store.claim_runs("w", 10, 1000, 10)
        assert [r.id for r in claimed] == ["live"] and claimed[0].claim_count == 1
        assert claimed[0].traceparent is None  # started before trace context was stored
    finally:
        store.close()


def test_upgrading_postgres_to_schema_2_turns_events_of_ended_runs_into_dead_letters(
    pg_dsn: str, pg_schema: str
) -> None:
    from persistence import schema

    first = schema.migrations("postgres")[0]
    run_ids = {
        "error": "00000000-0000-4000-8000-000000000001",
        "active": "00000000-0000-4000-8000-000000000002",
    }
    with psycopg.connect(pg_dsn, autocommit=True) as db:
        db.execute(f'CREATE SCHEMA "{pg_schema}"')
        db.execute(f'SET search_path = "{pg_schema}"')
        db.execute(first.sql.encode())
        db.execute(
            f"CREATE TABLE {schema.VERSION_TABLE} (version integer PRIMARY KEY, "
            "name text NOT NULL, applied_at timestamptz)"
        )
        db.execute(f"INSERT INTO {schema.VERSION_TABLE} VALUES (1, %s, now())", (first.name,))
        for status, run_id in run_ids.items():
            db.execute(
                "INSERT INTO workflow_runs (id, workflow_name, workflow_version, state, "
                "snapshot, status, created_at, updated_at) VALUES (%s, 'parked', 'x', "
                "'waiting', '{}', %s, now(), now())",
                (run_id, status),
            )
            db.execute(
                "INSERT INTO workflow_inbox (run_id, event, created_at) VALUES "
                '(%s, \'{"type": "GO"}\', now())',
                (run_id,),
            )
    sep = "&" if "?" in pg_dsn else "?"
    store = open_store(f"{pg_dsn}{sep}schema={pg_schema}", migrate=True)
    try:
        assert store.schema_version() == schema.latest_version("postgres")
        (letter,) = store.dead_letters(run_ids["error"])
        assert letter.reason == "the run had ended (error) before this event was applied"
        assert store.pending_events(run_ids["error"]) == []
        claimed = store.claim_runs("w", int(time.time() * 1000), 1000, 10)
        assert [r.id for r in claimed] == [run_ids["active"]] and claimed[0].claim_count == 1
    finally:
        store.close()


def test_a_worker_shows_every_threads_stack_on_sigusr1_and_serves_on(e: Env) -> None:
    with workers(e, count=1, threads=2) as (w,):
        wait_until(w.started, "the worker started")
        w.process.send_signal(signal.SIGUSR1)  # what an operator does to a worker that hangs
        wait_until(lambda: "(most recent call first)" in w.text(), "the stacks on stderr")
        assert w.process.poll() is None  # the dump does not stop it
        run_id = e.runtime().start("poison", {"kind": "fine"})
        wait_until(ended(e.store, [run_id]), "the run ended")
        stop_cleanly([w])
    stacks = w.text()
    # the main thread's frames at least (it logs that it serves before its threads start)
    assert re.search(r'File ".*persistence/worker\.py", line \d+ in run', stacks), stacks


# -- keys and values an index cannot hold (issue 47 R3) ---------------------------------------


def test_a_key_over_the_stored_limit_is_refused_alike_on_every_store(e: Env) -> None:
    runtime = e.runtime()
    before = e.store.count_runs()
    for key, size in (("k" * 1001, 1001), ("\u00e9" * 501, 1002), ("k" * 3000, 3000)):
        # (`start` may refuse it earlier, by its own rules: never later than the store)
        with pytest.raises((ValueError, StoreEncodingError), match=f"{size} bytes"):
            runtime.start("parked", key=key)
        with pytest.raises(
            StoreEncodingError,
            match=f"is {size} bytes in UTF-8; a run's key is at most {MAX_STORED_KEY_BYTES}",
        ):
            structs.replace(_row("parked"), key=key)
    assert e.store.count_runs() == before
    # the longest key, in bytes that do not compress: PostgreSQL's index holds it too
    longest = "".join(hashlib.sha256(str(n).encode()).hexdigest() for n in range(16))[:1000]
    record, created = e.store.create_run(structs.replace(_row("parked"), key=longest), [], 0)
    assert (
        created
        and e.store.create_run(structs.replace(_row("parked"), key=longest), [], 0)[0] == record
    )
    assert runtime.get_by_key("parked", longest).id == record.id


def _row(name: str) -> NewRun:
    return NewRun(str(uuid.uuid4()), name, "v1", None, "waiting", {})


def test_a_derived_child_key_over_the_limit_fails_its_parent_once_and_batch_mates_finish(
    e: Env,
) -> None:
    runtime = e.runtime()
    parent_key = "p" * 500  # one start takes; `<key>/<invoke id>` is 1,005 bytes
    parent = runtime.start("spawner", key=parent_key)
    mates = [runtime.start("spawner", key=f"mate-{n}") for n in range(7)]
    with workers(e) as fleet:
        wait_until(ended(e.store, [parent, *mates]), "every run ended")
        time.sleep(1.0)  # long enough for a claim loop to show in the claim counts
        failed = e.store.get_run(parent)
        assert failed.status == "error", failed
        reason = failed.last_error or ""
        assert f"key of the child run invoked as {faulty.KID_INVOKE!r}" in reason
        assert f"is 1005 bytes in UTF-8; a run's key is at most {MAX_STORED_KEY_BYTES}" in reason
        assert failed.claim_count == 1
        assert faulty.calls("produce", parent) == 1
        assert runtime.list(key=f"{parent_key}/{faulty.KID_INVOKE}") == []
        for run_id in mates:
            run = e.store.get_run(run_id)
            assert run.status == "done" and run.claim_count <= 2, run
            child = runtime.get_by_key("kid", f"{run.key}/{faulty.KID_INVOKE}")
            assert child.status == "done"
        stop_cleanly(fleet)
    assert "Traceback" not in logs(fleet)


def test_a_child_postgresql_cannot_index_fails_its_parent_once_not_as_an_outage(e: Env) -> None:
    """PostgreSQL's own limit (2,704 bytes an index row), reached by a child machine whose id
    is 2,820 bytes (ids are the developer's; keys are held to MAX_STORED_KEY_BYTES on every
    store). SQLite has no such limit: there the child is stored and the parent finishes."""
    runtime = e.runtime()
    parent = runtime.start("long_spawner")
    mates = [runtime.start("spawner") for _ in range(7)]
    with workers(e, log_level="DEBUG") as fleet:
        wait_until(ended(e.store, [parent, *mates]), "every run ended")
        time.sleep(1.0)
        run = e.store.get_run(parent)
        assert faulty.calls("produce", parent) == 1
        if e.kind == "sqlite":
            assert (run.status, len(runtime.list(name=faulty.LONG_ID))) == ("done", 1)
        else:
            assert run.status == "error", run
            assert (
                "the store refused its step: PostgreSQL cannot hold a value (54000): index "
                "row size" in (run.last_error or "")
            )
            assert run.claim_count == 1
            assert runtime.list(name=faulty.LONG_ID) == []
        for run_id in mates:
            assert e.store.get_run(run_id).status == "done"
        stop_cleanly(fleet)
    text = logs(fleet)
    assert "unavailable" not in text.lower() and "backing off" not in text.lower()
