"""Fixtures for the persistence tests: real SQLite files and a real PostgreSQL server.

PostgreSQL is found through STATECHARTS_TEST_DSN (default postgresql://localhost/test). If nothing
answers there, a private server is started with initdb/pg_ctl in a temporary directory when those
binaries exist. Without any PostgreSQL the postgres tests skip with the reason, except under
CI=true, where that is a failure. Each test gets its own schema (via search_path), dropped after.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from persistence.stores import Store
from persistence.stores.memory import MemoryStore
from persistence.stores.postgres import PostgresStore
from persistence.stores.sqlite import SQLiteStore

DEFAULT_DSN = "postgresql://localhost/test"
STORE_KINDS = ("sqlite", "postgres", "memory")


def _answers(dsn: str) -> str | None:
    """None if a server answers at `dsn`, else the reason it does not."""
    try:
        with psycopg.connect(dsn, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        return None
    except psycopg.Error as exc:
        return str(exc).strip()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _private_server(workdir: Path) -> tuple[str, Callable[[], None]] | None:
    """Start a throwaway PostgreSQL with initdb/pg_ctl; None if the binaries are missing."""
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not bins:
        return None
    bindir = Path(bins[-1]).parent
    data, port = workdir / "pgdata", _free_port()
    prefix: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root: use the postgres account
        user = pwd.getpwnam("postgres")
        os.chown(workdir, user.pw_uid, user.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    subprocess.run(
        [*prefix, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-w", "-l", str(workdir / "log"),
         "-o", f"-p {port} -k {workdir} -c listen_addresses=127.0.0.1", "start"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def stop() -> None:
        subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
        )

    return dsn, stop


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """A DSN of a live PostgreSQL server (or skip / fail as the module docstring says)."""
    dsn = os.environ.get("STATECHARTS_TEST_DSN", DEFAULT_DSN)
    reason = _answers(dsn)
    if reason is None:
        yield dsn
        return
    workdir = Path(tempfile.mkdtemp(prefix="statecharts-pg-"))
    started = None
    try:
        started = _private_server(workdir)
    except (subprocess.CalledProcessError, KeyError, OSError) as exc:
        reason += f"; private server failed: {exc}"
    if started is None:
        shutil.rmtree(workdir, ignore_errors=True)
        message = f"no PostgreSQL at {dsn} ({reason}) and no private server could be started"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message + " -- CI=true requires PostgreSQL")
        pytest.skip(message)
    private_dsn, stop = started
    try:
        yield private_dsn
    finally:
        stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[str]:
    """A fresh, empty schema name on the test server, dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


StoreFactory = Callable[[], Store]


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    """Each kind of store in turn."""
    return str(request.param)


@pytest.fixture
def store_factory(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[StoreFactory]:
    """Opens store objects on ONE migrated database of `store_kind` (like separate processes)."""
    opened: list[Store] = []
    memory = MemoryStore()

    def make_sqlite() -> Store:
        return SQLiteStore(tmp_path / "runs.db")

    def make_memory() -> Store:
        return memory

    make: Callable[[], Store]
    if store_kind == "postgres":
        dsn = request.getfixturevalue("pg_dsn")
        schema = request.getfixturevalue("pg_schema")

        def make_postgres() -> Store:
            return PostgresStore(dsn, schema=schema, max_size=4)

        make = make_postgres
    else:
        make = make_sqlite if store_kind == "sqlite" else make_memory

    def factory() -> Store:
        store = make()
        opened.append(store)
        return store

    factory().migrate()
    yield factory
    for store in opened:
        store.close()


@pytest.fixture
def store(store_factory: StoreFactory) -> Store:
    """A migrated store of each kind."""
    return store_factory()


def wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """Poll until `predicate()` holds; fail the test with a clear message after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not reached within {timeout_s}s")
        time.sleep(0.05)


@pytest.fixture(params=["sqlite", "postgres"])
def crash_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a fresh database for a crash test's worker processes (SQLite with
    `synchronous=normal`, safe against SIGKILL; PostgreSQL in a schema of its own)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}?synchronous=normal"
    dsn = request.getfixturevalue("pg_dsn")
    schema = request.getfixturevalue("pg_schema")
    return f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"


def kill_and_replace(workers: list[subprocess.Popen[bytes]], victim: int,
                     spawn: Callable[[], subprocess.Popen[bytes]]) -> None:
    """SIGKILL worker process `victim` and start a replacement in its place."""
    workers[victim].send_signal(signal.SIGKILL)
    workers[victim].wait()
    workers[victim] = spawn()


def stop_workers(workers: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every worker process and wait for it (SIGKILL after 30 s)."""
    for w in workers:
        w.send_signal(signal.SIGTERM)
    for w in workers:
        try:
            w.wait(timeout=30)
        except subprocess.TimeoutExpired:
            w.kill()


Serve = Callable[..., str]
"""`serve(app, header_timeout_s=..., body_timeout_s=...)` -> the served app's base URL."""


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Serve apps for real on loopback, as `statecharts api` and `statecharts ui` do (uvicorn
    with `persistence.serving.config`), each on a free port in a thread; stopped afterwards."""
    import threading

    import uvicorn

    from persistence.serving import config

    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(app: object, **timeouts: float) -> str:
        port = _free_port()
        server = uvicorn.Server(config(app, "127.0.0.1", port, log_level="warning",
                                       limit_concurrency=100, **timeouts))  # fmt: skip
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        servers.append((server, thread))
        wait_for(lambda: server.started or not thread.is_alive(), 10)
        assert server.started, "server did not start"
        return f"http://127.0.0.1:{port}"

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(10)
        assert not thread.is_alive()
