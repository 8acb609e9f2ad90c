"""Fixtures for the persistence tests: real SQLite files and a real PostgreSQL server.

PostgreSQL is found through STATECHARTS_TEST_DSN (default postgresql://localhost/test). If nothing
answers there, a private server is started with initdb/pg_ctl in a temporary directory when those
binaries exist. Without any PostgreSQL the postgres tests skip with the reason, except under
CI=true, where that is a failure. Each test gets its own schema (via search_path), dropped after.

PgBouncer (`pgbouncer`, the Debian package `scripts/system-deps.sh` installs) is started once
per session on a free loopback port in front of that server, with one database in transaction
mode and one in session mode (`Bouncer`); without the program its tests skip, loudly, and fail
under CI=true.
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
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import psycopg
import pytest

from persistence.stores import Store
from persistence.stores.memory import MemoryStore
from persistence.stores.postgres import PostgresStore
from persistence.stores.sqlite import SQLiteStore

DEFAULT_DSN = "postgresql://localhost/test"
CITUS_DSN = os.environ.get("STATECHARTS_CITUS_DSN")
"""A Citus coordinator's DSN (docs/citus.md): its store kind is tested only when it is set."""
CITUS_SHARDS = 4
"""Shards per table in the tests' Citus schemas (each test distributes its own tables)."""
CITUS_KINDS = ("citus",) if CITUS_DSN else ()
STORE_KINDS = ("sqlite", "postgres", "memory", *CITUS_KINDS)
POOLED_KINDS = ("pgbouncer-transaction", "pgbouncer-session")
"""Store kinds behind PgBouncer (`store_kind` values the contract suite adds)."""


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
        [
            *prefix,
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-w",
            "-l",
            str(workdir / "log"),
            "-o",
            f"-p {port} -k {workdir} -c listen_addresses=127.0.0.1",
            "start",
        ],
        check=True,
        capture_output=True,
    )
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
        _missing(message)
    private_dsn, stop = started
    try:
        yield private_dsn
    finally:
        stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _missing(message: str) -> NoReturn:
    """Skip the test with `message`, or fail it under CI=true."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message + " -- CI=true requires it")
    pytest.skip(message)


@dataclass(frozen=True)
class Bouncer:
    """A private PgBouncer on loopback in front of the test server: database `transaction`
    (pool_mode=transaction, 8 server connections: clients share them), `session`, and `auto`
    (transaction mode, its server connections put in schema `auto_schema` by PgBouncer's
    `connect_query`: a store reaches its tables with no option at all)."""

    port: int
    user: str
    auto_schema: str

    def url(self, mode: str, schema: str | None = None, **options: str) -> str:
        """A store URL through the pooler in `mode`, with `pooler=mode` and `options`."""
        query = {"pooler": mode, **({"schema": schema} if schema else {}), **options}
        params = "&".join(f"{k}={urllib.parse.quote(v, safe='')}" for k, v in query.items())
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{mode}?{params}"

    def dsn(self, mode: str) -> str:
        """A plain libpq DSN through the pooler in `mode` (no store options)."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{mode}"


@pytest.fixture(scope="session")
def pgbouncer(pg_dsn: str) -> Iterator[Bouncer]:
    """PgBouncer started for the session (see the module docstring); stopped afterwards."""
    program = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
    if program is None:
        _missing("pgbouncer is not installed (Debian package pgbouncer; scripts/system-deps.sh)")
    auto_schema = f"t_pgbouncer_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{auto_schema}"')
        info = conn.info
        server = f"host={info.host} port={info.port} dbname={info.dbname} user={info.user}"
        user = info.user
    workdir = Path(tempfile.mkdtemp(prefix="statecharts-pgbouncer-"))
    workdir.chmod(0o755)  # (read by the account pgbouncer switches to)
    port = _free_port()
    (workdir / "users.txt").write_text(f'"{user}" ""\n')
    ini = workdir / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"transaction = {server} pool_mode=transaction pool_size=8\n"
        f"session = {server} pool_mode=session pool_size=40\n"
        f"auto = {server} pool_mode=transaction pool_size=8 "
        f"connect_query='SET search_path TO {auto_schema}'\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {workdir / 'users.txt'}\n"
        "max_client_conn = 1000\nquery_wait_timeout = 60\n"
        # pgbouncer refuses to run as root: it switches to the postgres account
        + ("user = postgres\n" if os.geteuid() == 0 else "")
    )
    for path in workdir.iterdir():
        path.chmod(0o644)
    log = (workdir / "log").open("wb")
    process = subprocess.Popen([program, str(ini)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 15
        while _answers(f"postgresql://{user}@127.0.0.1:{port}/session") is not None:
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"pgbouncer did not start: {(workdir / 'log').read_text()[-2000:]}")
            time.sleep(0.1)
        yield Bouncer(port, user, auto_schema)
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{auto_schema}" CASCADE')


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[str]:
    """A fresh, empty schema name on the test server, dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def citus_schema() -> Iterator[str]:
    """A fresh schema name on the Citus coordinator (`CITUS_DSN`), dropped after the test."""
    if CITUS_DSN is None:  # (opt-in, like the soak runs: skipped under CI=true too)
        pytest.skip("STATECHARTS_CITUS_DSN is not set (a Citus coordinator; docs/citus.md)")
    name = f"t_{uuid.uuid4().hex[:16]}"
    yield name
    with psycopg.connect(CITUS_DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def citus_url(schema: str) -> str:
    """The `citus://` store URL of `schema` on the Citus coordinator."""
    assert CITUS_DSN is not None
    rest = CITUS_DSN.split("://", 1)[1]
    return f"citus://{rest}{'&' if '?' in rest else '?'}schema={schema}&shards={CITUS_SHARDS}"


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
    elif store_kind in POOLED_KINDS:
        mode = store_kind.split("-")[1]
        dsn = request.getfixturevalue("pgbouncer").dsn(mode)
        schema = request.getfixturevalue("pg_schema")

        def make_pooled() -> Store:
            return PostgresStore(dsn, schema=schema, pooler=mode, max_size=4)

        make = make_pooled
    elif store_kind == "citus":
        from persistence.stores import open_store

        url = citus_url(request.getfixturevalue("citus_schema"))

        def make_citus() -> Store:
            return open_store(url, check=False, max_connections=4)

        make = make_citus
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


@pytest.fixture
def worker_of(store: Store) -> Iterator[Callable[..., Any]]:
    """`worker_of(machine, **options)`: a `Runtime` of `machine` on `store` (with `options`,
    e.g. its limits) served by a `Worker` in a thread of this process (2 threads, a 3 s
    lease), stopped when the test ends."""
    import threading

    from persistence.runtime import Runtime
    from persistence.worker import Worker

    workers: list[tuple[Worker, threading.Thread]] = []

    def start(machine: Any, **options: Any) -> Runtime:
        runtime = Runtime(store, [machine], **options)
        worker = Worker(runtime, 2, poll_ms=50, lease_ms=3_000)
        thread = threading.Thread(target=worker.run)
        thread.start()
        workers.append((worker, thread))
        return runtime

    yield start
    for worker, thread in workers:
        worker.stop()
        thread.join(timeout=30)


def wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """Poll until `predicate()` holds; fail the test with a clear message after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not reached within {timeout_s}s")
        time.sleep(0.05)


def store_url(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a fresh database of store `kind` (SQLite with `synchronous=normal`, safe
    against SIGKILL; PostgreSQL, directly or through PgBouncer, in a schema of its own)."""
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}?synchronous=normal"
    if kind == "memory":
        return "memory://"
    if kind == "citus":
        return citus_url(request.getfixturevalue("citus_schema"))
    schema = request.getfixturevalue("pg_schema")
    if kind in POOLED_KINDS:
        bouncer: Bouncer = request.getfixturevalue("pgbouncer")
        return bouncer.url(kind.split("-")[1], schema)
    dsn = request.getfixturevalue("pg_dsn")
    return f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"


@pytest.fixture(params=["sqlite", "postgres", *CITUS_KINDS])
def crash_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a fresh database for a crash test's worker processes (`store_url`)."""
    return store_url(request.param, request, tmp_path)


def handles_sigterm(pid: int) -> bool | None:
    """Whether process `pid` has a handler of its own for SIGTERM, by the caught-signals mask
    Linux shows in /proc (None where there is none to read)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return None


def kill_and_replace(
    workers: list[subprocess.Popen[bytes]],
    victim: int,
    spawn: Callable[[], subprocess.Popen[bytes]],
) -> None:
    """SIGKILL worker process `victim` and start a replacement in its place."""
    workers[victim].send_signal(signal.SIGKILL)
    workers[victim].wait()
    workers[victim] = spawn()


def stop_workers(workers: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every worker process and wait for it (SIGKILL after 30 s). Each is first given
    up to 30 s to install its SIGTERM handler (`Worker.run`): one signalled while Python
    still imports dies of it (-15), and under load a start takes seconds (a fixed grace of 2 s
    after the last spawn was once too short on 2 cores)."""
    deadline = time.monotonic() + 30
    for w in workers:
        while w.poll() is None and handles_sigterm(w.pid) is False:
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
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
        server = uvicorn.Server(
            config(app, "127.0.0.1", port, log_level="warning", limit_concurrency=100, **timeouts)
        )
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
