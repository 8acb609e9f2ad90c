"""Encrypted payloads (issue 42), on a SQLite file and on PostgreSQL, stepped by real workers.

A workflow carries a marked secret through its input, context, a call, an outbox action and
emit, events to it, to its child run and back, a dead letter and its output
(`secret_workflows.vault`). With a key ring, every table of the database is then dumped as text
(all columns, all rows; SQLite's files byte for byte too) and the secret is nowhere, while the
runtime, `runs show` and the UI read it back. Without keys the same run leaves it in each of
those columns (so the scan looks where it must). Rotation: rows sealed with an old key read after
a new one is put first, `db reencrypt` moves them, and the old key can then go. A missing key
fails the run naming the key (resumable once the key is back); a payload moved to another run
does not open; the UI and `runs show` without the key show "encrypted".
"""

from __future__ import annotations

import base64
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg import sql

from persistence import KeyRing, Runtime, Worker
from persistence.cli import main as cli_main
from persistence.stores import Store
from persistence.stores.codec import KEYS_ENV, KeyConfigError, PayloadKeyError, parse_keys
from persistence.stores.postgres import PostgresStore
from persistence.stores.sqlite import SQLiteStore
from persistence.ui.app import create_app
from statecharts import SimulatedClock
from tests.persistence.conftest import stop_workers, wait_for
from tests.persistence.lifecycle_workflows import tally
from tests.persistence.secret_workflows import SECRET, vault

KEY1 = bytes(range(32))
KEY2 = bytes(range(100, 132))
K1 = [("k1", KEY1)]


def _keys_text(*pairs: tuple[str, bytes]) -> str:
    return ",".join(f"{i}:{base64.b64encode(k).decode()}" for i, k in pairs)


@dataclass
class Database:
    """One database of a kind: stores opened on it (as separate processes would), its URL,
    every table's text as the server holds it (`dump`: all rows, all columns) and, for SQLite,
    its files' bytes (`files`: old row versions in the WAL and free pages too)."""

    kind: str
    url: str
    open: Callable[[], Store]
    dump: Callable[[], str]
    execute: Callable[[str, tuple[object, ...]], None]
    files: Callable[[], str] = lambda: ""


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    opened: list[Store] = []
    if request.param == "sqlite":
        path = tmp_path / "runs.db"

        def open_sqlite() -> Store:
            opened.append(SQLiteStore(path))
            return opened[-1]

        def dump_sqlite() -> str:
            with sqlite3.connect(path) as db:
                tables = [
                    r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                ]
                return "\n".join(
                    repr(row) for t in tables for row in db.execute(f'SELECT * FROM "{t}"')
                )

        def files_sqlite() -> str:
            return "".join(p.read_bytes().decode("latin-1") for p in tmp_path.glob("runs.db*"))

        def execute_sqlite(statement: str, params: tuple[object, ...]) -> None:
            with sqlite3.connect(path) as db:
                db.execute(statement, params)

        db = Database(
            "sqlite", f"sqlite:///{path}", open_sqlite, dump_sqlite, execute_sqlite, files_sqlite
        )
    else:
        dsn, schema = request.getfixturevalue("pg_dsn"), request.getfixturevalue("pg_schema")

        def open_postgres() -> Store:
            opened.append(PostgresStore(dsn, schema=schema, max_size=4))
            return opened[-1]

        def dump_postgres() -> str:
            with psycopg.connect(dsn) as conn:
                tables = [
                    r[0]
                    for r in conn.execute(
                        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                        (schema,),
                    )
                ]
                return "\n".join(
                    str(row[0])
                    for t in tables
                    for row in conn.execute(
                        sql.SQL("SELECT t::text FROM {}.{} AS t").format(
                            sql.Identifier(schema), sql.Identifier(t)
                        )
                    )
                )

        def execute_postgres(statement: str, params: tuple[object, ...]) -> None:
            with psycopg.connect(dsn, options=f"-c search_path={schema}") as conn:
                conn.execute(statement.replace("?", "%s"), params)

        db = Database(
            "postgres",
            f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}",
            open_postgres,
            dump_postgres,
            execute_postgres,
        )
    db.open().migrate()
    yield db
    for store in opened:
        store.close()


@pytest.fixture
def clock() -> SimulatedClock:
    return SimulatedClock(start=1_700_000_000_000)


def _run_vault(runtime: Runtime, *, finish: bool = True) -> str:
    """The vault workflow through a worker, the secret in every payload; its run id."""
    run_id = runtime.start("vault", {"card": SECRET})
    worker = Worker(runtime)
    worker.run_until_idle()  # the call, the action, the emit, the child run started
    runtime.send(run_id, {"type": "TELL", "secret": SECRET})  # to the child and back
    worker.run_until_idle()
    runtime.send(run_id, "STRAY")  # a dead letter holding the card
    worker.run_until_idle()
    runtime.send(run_id, "BYE")  # the child ends: its output (the secret) to the parent
    worker.run_until_idle()
    assert runtime.get(run_id).state == "waiting"
    if finish:
        runtime.send(run_id, {"type": "NOTE", "text": SECRET})
        worker.run_until_idle()
    return run_id


def _sealed_by(text: str, key_id: str) -> int:
    """How many payloads in a dump are sealed with `key_id` (SQLite's JSON, or PostgreSQL's
    inside a row's text, its quotes doubled)."""
    return len(re.findall(r'"+\$enc"+: ?"+' + re.escape(key_id) + '"+', text))


def _check_reads_back(store: Store, run_id: str) -> None:
    """Everything the run wrote reads back in clear through a store with the key."""
    run = store.get_run(run_id)
    assert (run.status, run.state, run.problem) == ("done", "done", None)
    assert run.snapshot["context"]["kept"] == {"heard": [SECRET], "card": SECRET}
    assert run.snapshot["context"]["pong"] == run.snapshot["context"]["note"] == SECRET
    effects = store.list_effects(run_id)
    assert {e.kind: e.result for e in effects} == {"action": {"audited": SECRET}, "emit": None}
    assert [e.payload["event"] for e in effects if e.kind == "emit"] == [
        {"type": "vault.ready", "card": SECRET}
    ]
    (call,) = store.list_calls(run_id)
    assert call.payload["input"]["card"] == SECRET
    assert [d.event for d in store.dead_letters(run_id)] == [{"type": "PING", "secret": SECRET}]
    journal = [e.event for e in store.list_events(run_id)]
    assert {"type": "NOTE", "text": SECRET} in journal
    assert {"type": "TELL", "secret": SECRET} in journal


def test_no_table_holds_the_secret_in_clear_and_the_runtime_reads_it_back(
    database: Database, clock: SimulatedClock
) -> None:
    runtime = Runtime(database.open(), [vault], clock=clock, codec=KeyRing(K1))
    others = [runtime.start("vault", {"card": SECRET}) for _ in range(4)]  # (batched steps)
    others += runtime.start_many("vault", [{"card": SECRET}] * 3)  # (one statement's rows)
    run_id = _run_vault(runtime)
    assert {runtime.get(other).state for other in others} == {"talking"}
    text = database.dump()
    assert SECRET not in text and SECRET not in database.files()
    assert _sealed_by(text, "k1") >= 10  # snapshots, outbox, calls, inbox, journal
    _check_reads_back(runtime.store, run_id)
    (child,) = runtime.children(run_id)
    assert runtime.get(child.id).snapshot["context"]["card"] == SECRET
    # what stays queryable in clear: states, statuses, workflow names, keys
    assert "waiting" in text and "vault" in text and "done" in text


def test_without_keys_the_same_run_leaves_the_secret_in_every_payload_column(
    database: Database, clock: SimulatedClock
) -> None:
    runtime = Runtime(database.open(), [vault], clock=clock)
    _run_vault(runtime)
    text = database.dump()
    assert _sealed_by(text, "k1") == 0
    assert text.count(SECRET) >= 10  # (so the scan above looks where the secret would be)


def test_search_attributes_stay_queryable_in_clear_while_the_context_is_sealed(
    database: Database, clock: SimulatedClock
) -> None:
    """A workflow's search attributes are indexed as text (docs: "What stays in clear"), so
    `--where` finds the run under encryption; the rest of its context stays sealed."""
    runtime = Runtime(database.open(), [tally], clock=clock, codec=KeyRing(K1))
    run_id = runtime.start("tally", {"customer": "cust-4711", "region": SECRET})
    runtime.send(run_id, {"type": "MOVE", "region": "eu-west"})  # a step rewrites it
    assert [r.id for r in runtime.list(search={"customer": "cust-4711", "region": "eu-west"})] == [
        run_id
    ]
    text = database.dump()
    assert "cust-4711" in text and "eu-west" in text  # the indexed values, in clear
    assert SECRET not in text  # the value it had before the step: only in sealed payloads
    assert _sealed_by(text, "k1") >= 2  # the snapshot, the journal's event and snapshot


def test_rotation_old_rows_read_reencrypt_moves_them_and_the_old_key_can_go(
    database: Database, clock: SimulatedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = Runtime(database.open(), [vault], clock=clock, codec=KeyRing(K1))
    run_id = _run_vault(first, finish=False)  # waiting for NOTE, all under k1
    # a new key, first in the ring, the old one kept: a new process reads the old rows
    rotated = Runtime(
        database.open(), [vault], clock=clock, codec=KeyRing([("k2", KEY2), ("k1", KEY1)])
    )
    assert rotated.get(run_id).snapshot["context"]["card"] == SECRET
    rotated.send(run_id, {"type": "NOTE", "text": SECRET})  # written under k2
    Worker(rotated).run_until_idle()
    text = database.dump()
    assert _sealed_by(text, "k1") > 0 and _sealed_by(text, "k2") > 0
    _check_reads_back(rotated.store, run_id)
    # the re-encrypt command (keys from the environment), a few rows per transaction
    monkeypatch.setenv(KEYS_ENV, _keys_text(("k2", KEY2), ("k1", KEY1)))
    assert cli_main(["db", "reencrypt", "--store", database.url, "--batch", "3"]) == 0
    text = database.dump()
    assert _sealed_by(text, "k1") == 0 and _sealed_by(text, "k2") >= 10
    assert SECRET not in text
    # the old key removed: everything still reads, in a new process
    only_new = Runtime(database.open(), [vault], clock=clock, codec=KeyRing([("k2", KEY2)]))
    _check_reads_back(only_new.store, run_id)
    # run again: nothing is left to move
    assert cli_main(["db", "reencrypt", "--store", database.url]) == 0


def test_reencrypt_seals_rows_written_before_encryption_was_turned_on(
    database: Database, clock: SimulatedClock
) -> None:
    run_id = _run_vault(Runtime(database.open(), [vault], clock=clock))
    assert SECRET in database.dump()
    store = database.open()
    store.use_codec(KeyRing(K1))
    _check_reads_back(store, run_id)  # rows in clear read as they are
    report = store.reencrypt_payloads(batch=4)
    assert report.rewritten >= 10 and not report.unreadable and not report.problems
    assert SECRET not in database.dump()
    _check_reads_back(store, run_id)


def test_a_missing_key_fails_the_run_naming_the_key_and_resumes_once_it_is_back(
    database: Database, clock: SimulatedClock
) -> None:
    runtime = Runtime(database.open(), [vault], clock=clock, codec=KeyRing(K1))
    run_id = _run_vault(runtime, finish=False)
    # a worker whose ring lacks k1 (a wrong key under another id)
    keyless = Runtime(database.open(), [vault], clock=clock, codec=KeyRing([("k2", KEY2)]))
    record = keyless.get(run_id)
    assert record.problem is not None and "'k1'" in record.problem
    assert record.snapshot == {}  # never a wrong value in its place
    with pytest.raises(PayloadKeyError, match="key 'k1'"):
        keyless.store.list_events(run_id)
    keyless.send(run_id, {"type": "NOTE", "text": "late"})  # queued: the run is not readable
    Worker(keyless).run_until_idle()
    failed = runtime.get(run_id)
    assert failed.status == "error"
    assert failed.last_error is not None and "encrypted with key 'k1'" in failed.last_error
    assert "not configured" in failed.last_error and SECRET not in failed.last_error
    # the key is back: the run resumes where it was and finishes
    runtime.resume(run_id)
    runtime.send(run_id, {"type": "NOTE", "text": SECRET})
    Worker(runtime).run_until_idle()
    assert runtime.get(run_id).snapshot["context"]["note"] == SECRET
    assert runtime.get(run_id).status == "done"


def test_a_payload_moved_to_another_run_does_not_open(
    database: Database, clock: SimulatedClock
) -> None:
    runtime = Runtime(database.open(), [vault], clock=clock, codec=KeyRing(K1))
    one, other = _run_vault(runtime), _run_vault(runtime, finish=False)
    database.execute(
        "UPDATE workflow_runs SET snapshot = (SELECT snapshot FROM workflow_runs "
        "WHERE id = ?) WHERE id = ?",
        (one, other),
    )
    reread = database.open()
    reread.use_codec(KeyRing(K1))
    problem = reread.get_run(other).problem
    assert problem is not None and "does not decrypt under key 'k1'" in problem
    assert reread.get_run(one).snapshot["context"]["card"] == SECRET


def test_ui_and_runs_show_decrypt_with_the_key_and_say_encrypted_without_it(
    database: Database,
    clock: SimulatedClock,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_id = _run_vault(Runtime(database.open(), [vault], clock=clock, codec=KeyRing(K1)))
    keyless = database.open()
    keyless.use_codec(None, show_sealed=True)  # as `statecharts ui` opens it without keys
    with TestClient(create_app(keyless, [vault])) as client:
        page = client.get(f"/runs/{run_id}")
        assert page.status_code == 200
        assert "encrypted" in page.text and "k1" in page.text and SECRET not in page.text
    keyed = database.open()
    keyed.use_codec(KeyRing(K1), show_sealed=True)
    with TestClient(create_app(keyed, [vault])) as client:
        assert SECRET in client.get(f"/runs/{run_id}").text
    monkeypatch.delenv(KEYS_ENV, raising=False)
    assert cli_main(["runs", "show", run_id, "--store", database.url]) == 0
    shown = capsys.readouterr().out
    assert '"encrypted": "key k1 not configured here"' in shown and SECRET not in shown
    monkeypatch.setenv(KEYS_ENV, _keys_text(*K1))
    assert cli_main(["runs", "show", run_id, "--store", database.url]) == 0
    assert SECRET in capsys.readouterr().out


def test_keys_are_checked_and_never_shown(tmp_path: Path) -> None:
    ring = parse_keys(_keys_text(("k2", KEY2), ("k1", KEY1)), KEYS_ENV)
    assert (ring.current, ring.key_ids) == ("k2", ["k2", "k1"])
    assert base64.b64encode(KEY2).decode() not in repr(ring)
    for text, message in (
        (f"k1:{base64.b64encode(b'short').decode()}", "5 bytes"),
        ("k1:not base64!", "not base64"),
        ("nokey", "not id:base64key"),
        (_keys_text(("k1", KEY1), ("k1", KEY2)), "given twice"),
        (_keys_text(("bad id", KEY1)), "key id of entry 1"),
        (f"{base64.b64encode(KEY1).decode()}:k1", "entry 1 is not base64"),
    ):
        with pytest.raises(KeyConfigError, match=message) as caught:
            parse_keys(text, KEYS_ENV)
        assert base64.b64encode(KEY1).decode() not in str(caught.value)
    keys = tmp_path / "keys"
    keys.write_text(f"# current first\n{_keys_text(('k2', KEY2))}\n{_keys_text(*K1)}\n")
    store_url = f"sqlite:///{tmp_path / 'runs.db'}"
    assert cli_main(["db", "upgrade", "--store", store_url]) == 0
    assert cli_main(["db", "reencrypt", "--store", store_url, "--keys-file", str(keys)]) == 0
    with pytest.raises(SystemExit, match=r"keys file .*missing"):
        cli_main(
            ["db", "reencrypt", "--store", store_url, "--keys-file", str(tmp_path / "missing")]
        )


def test_a_call_input_or_queued_event_that_does_not_open_fails_its_run_naming_the_key(
    database: Database, clock: SimulatedClock
) -> None:
    runtime = Runtime(database.open(), [vault], clock=clock, codec=KeyRing(K1), step_in_send=False)
    good, bad_call = runtime.start("vault", {"card": SECRET}), runtime.start("vault", {"card": "x"})
    # the second run's call input replaced by the first's envelope (bound to the first run)
    database.execute(
        "UPDATE workflow_calls SET payload = (SELECT payload FROM workflow_calls "
        "WHERE run_id = ?) WHERE run_id = ?",
        (good, bad_call),
    )
    Worker(runtime).run_until_idle()
    assert runtime.get(good).state == "talking"
    failed = runtime.get(bad_call)
    assert failed.status == "error" and "does not decrypt under key 'k1'" in str(
        failed.snapshot.get("error") or failed.last_error
    )
    (call,) = runtime.store.list_calls(bad_call)
    assert call.status == "failed" and "does not decrypt" in str(call.error)
    # a queued event of another run moved into this run's inbox: the run is failed by its claim
    other = runtime.start("vault", {"card": "y"})
    Worker(runtime).run_until_idle()
    runtime.send(good, {"type": "TELL", "secret": SECRET})  # queued (step_in_send=False)
    runtime.send(other, {"type": "TELL", "secret": "y"})
    database.execute(
        "UPDATE workflow_inbox SET event = (SELECT event FROM workflow_inbox WHERE "
        "run_id = ? AND dead_at IS NULL) WHERE run_id = ? AND dead_at IS NULL",
        (good, other),
    )
    Worker(runtime).run_until_idle()
    assert runtime.get(good).snapshot["context"]["pong"] == SECRET
    broken = runtime.get(other)
    assert broken.status == "error" and broken.last_error is not None
    assert "inbox.event does not decrypt under key 'k1'" in broken.last_error


ROOT = Path(__file__).resolve().parents[2]


def _worker(url: str, keys: str | None, log: Path) -> subprocess.Popen[bytes]:
    """`statecharts worker` in a process of its own, with the keys in its environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATECHARTS_KEYS")}
    if keys is not None:
        env[KEYS_ENV] = keys
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "persistence.cli",
            "worker",
            "--store",
            url,
            "--machines",
            "tests.persistence.secret_workflows",
            "--poll-ms",
            "20",
            "--lease-ms",
            "1500",
            "--log-level",
            "WARNING",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
    )


def test_worker_processes_take_the_keys_from_the_environment(
    database: Database, tmp_path: Path
) -> None:
    runtime = Runtime(database.open(), [vault], codec=KeyRing(K1), step_in_send=False)
    run_id = runtime.start("vault", {"card": SECRET, "hold_s": 1.2})  # (beats every 0.5 s)
    workers = [_worker(database.url, _keys_text(*K1), tmp_path / "worker.log")]
    try:
        wait_for(lambda: runtime.get(run_id).state == "talking", 60)
        for event, then in (
            ({"type": "TELL", "secret": SECRET}, "talking"),
            ("STRAY", "talking"),
            ("BYE", "waiting"),
            ({"type": "NOTE", "text": SECRET}, "done"),
        ):
            before = runtime.store.count_events(run_id)
            runtime.send(run_id, event)
            wait_for(
                lambda b=before, t=then: (
                    runtime.store.count_events(run_id) > b and runtime.get(run_id).state == t
                ),
                60,
            )
        wait_for(lambda: runtime.get(run_id).status == "done", 60)
        # a worker without the keys fails a run it cannot read, naming the key
        unreadable = runtime.start("vault", {"card": SECRET})
        stop_workers(workers)
        workers = [_worker(database.url, None, tmp_path / "keyless.log")]
        wait_for(lambda: runtime.get(unreadable).status == "error", 60)
    finally:
        stop_workers(workers)
    _check_reads_back(runtime.store, run_id)
    assert runtime.store.list_calls(run_id)[0].details == {"card": SECRET}  # the heartbeat's
    failed = runtime.get(unreadable)
    assert failed.last_error is not None and "encrypted with key 'k1'" in failed.last_error
    assert SECRET not in database.dump() and SECRET not in database.files()
    assert SECRET not in (tmp_path / "keyless.log").read_text()
