"""The persistence CLI, run as real subprocesses against a real SQLite file."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson
import pytest

from persistence import schema
from persistence.ingress import Signature
from persistence.runtime import Runtime
from persistence.stores import open_store
from persistence.worker import Worker
from tests.persistence.workflows import approval

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "persistence.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_db_upgrade_then_runs_list_show_cancel(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    refused = cli("runs", "list", "--store", url)
    assert refused.returncode != 0 and "statecharts db upgrade --store" in refused.stderr
    upgraded = cli("db", "upgrade", "--store", url)
    latest = schema.latest_version("sqlite")  # (a new migration moves it)
    assert upgraded.returncode == 0 and f"schema at version {latest}" in upgraded.stdout
    assert f"already at version {latest}" in cli("db", "upgrade", "--store", url).stdout

    store = open_store(url)
    runtime = Runtime(store, [approval])
    run_id = runtime.start("approval", key="inv-1")
    listed = cli("runs", "list", "--store", url, "--json")
    rows = orjson.loads(listed.stdout)
    assert [(r["id"], r["state"], r["status"], r["key"]) for r in rows] == [
        (run_id, "waiting", "active", "inv-1")
    ]
    shown = orjson.loads(cli("runs", "show", "--store", url, run_id).stdout)
    assert shown["snapshot"]["value"] == "waiting" and shown["effects"] == []
    for note in ("a", "b", "c"):
        runtime.send(run_id, {"type": "NOTE", "text": note})  # no transition: journaled only
    Worker(runtime).run_until_idle()
    newest = orjson.loads(cli("runs", "show", "--store", url, run_id, "--last", "2").stdout)
    assert [e["event"]["text"] for e in newest["events"]] == ["b", "c"]
    assert newest["events_total"] == 3
    bad = cli("runs", "show", "--store", url, run_id, "--last", "-1")
    assert bad.returncode != 0 and "--last must be at least 0" in bad.stderr
    cancelled = cli("runs", "cancel", "--store", url, run_id, "--reason", "duplicate")
    assert cancelled.stdout.strip() == f"{run_id}: cancelled"
    assert runtime.get(run_id).status == "cancelled"
    other = runtime.start("approval")  # a reason no store holds as it is (bytes not UTF-8)
    odd = cli("runs", "cancel", "--store", url, other, "--reason", os.fsdecode(b"dup \xff"))
    assert odd.stdout.strip() == f"{other}: cancelled", odd.stderr
    assert runtime.get(other).last_error == "dup \\udcff"
    missing = cli("runs", "show", "--store", url, "7c9e6679-7425-40de-944b-e07fc1f90ae7")
    assert missing.returncode != 0 and "no run with id" in missing.stderr
    store.close()


def test_runs_versions_reports_runs_no_definition_can_step(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = open_store(url, migrate=True)
    runtime = Runtime(store, [approval])
    runtime.start("approval")
    ok = cli("runs", "versions", "--store", url, "--machines", "tests.persistence.workflows")
    assert ok.returncode == 0 and "every active run" in ok.stdout
    other = tmp_path / "v2machines.py"
    other.write_text(
        "from statecharts import create_machine\n"
        "approval = create_machine({'id': 'approval', 'initial': 'a', 'states': {'a': {}}})\n"
    )
    env_path = f"{tmp_path}{os.pathsep}{ROOT}"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "persistence.cli",
            "runs",
            "versions",
            "--store",
            url,
            "--machines",
            "v2machines",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": env_path},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert f"approval  version {approval.fingerprint}" in result.stdout and "1 active run" in (
        result.stdout
    )
    bad = cli("worker", "--store", url, "--machines", "no.such.module")
    assert bad.returncode != 0 and "cannot import 'no.such.module'" in bad.stderr
    store.close()


STATECHARTS = Path(sys.executable).parent / "statecharts"


def console(*args: str, cwd: Path, extra_path: str = "") -> subprocess.CompletedProcess[str]:
    """The installed `statecharts` command run in `cwd` (so `--machines` imports from there)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (extra_path, str(ROOT)) if p)}
    return subprocess.run(
        [str(STATECHARTS), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def test_runs_start_send_and_list_by_key_with_id_prefixes(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text("from tests.persistence.workflows import approval\n")
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    assert console("db", "upgrade", "--store", url, cwd=tmp_path).returncode == 0
    start = ("runs", "start", "approval", "--store", url, "--machines", "mine", "--key", "inv-7")
    first = console(*start, "--input", '{"amount": 7}', cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    run_id, outcome, status, state = first.stdout.split()
    assert (outcome, status, state) == ("started", "active", "waiting")
    again = console(*start, cwd=tmp_path)
    assert again.stdout.split()[:2] == [run_id, "existing"]
    bad_input = console(*start[:-1], "inv-8", "--input", "{amount: 7}", cwd=tmp_path)
    assert bad_input.returncode != 0 and "--input: not JSON" in bad_input.stderr
    other = console(*start[:-1], "inv-8", cwd=tmp_path).stdout.split()[0]

    sent = console(
        "runs",
        "send",
        "--store",
        url,
        "--workflow",
        "approval",
        "--key",
        "inv-7",
        "--machines",
        "mine",
        "--event",
        '{"type": "APPROVE", "by": "ann"}',
        cwd=tmp_path,
    )
    assert sent.returncode == 0 and sent.stdout.startswith(f"{run_id}  queued")
    by_prefix = console(
        "runs",
        "send",
        other[:6],
        "--store",
        url,
        "--event",
        "REJECT",
        "--machines",
        "mine",
        cwd=tmp_path,
    )
    assert by_prefix.returncode == 0 and by_prefix.stdout.startswith(f"{other}  queued")
    store = open_store(url)
    Worker(Runtime(store, [approval])).run_until_idle()
    assert store.get_run(run_id).snapshot["context"]["approved_by"] == "ann"
    assert store.get_run(other).state == "rejected"

    listed = console("runs", "list", "--store", url, "--key", "inv-7", cwd=tmp_path)
    header, row = listed.stdout.splitlines()
    assert header.split() == ["ID", "WORKFLOW", "KEY", "STATUS", "STATE", "STARTED", "UPDATED"]
    assert row.split()[:5] == [run_id, "approval", "inv-7", "done", "approved"]
    assert row.endswith("ago")
    as_json = orjson.loads(
        console("runs", "list", "--store", url, "--key", "inv-8", "--json", cwd=tmp_path).stdout
    )
    assert [(r["id"], r["status"]) for r in as_json] == [(other, "done")]
    shown = console("runs", "show", run_id[:8], "--store", url, cwd=tmp_path)
    assert orjson.loads(shown.stdout)["id"] == run_id
    ended = console(
        "runs",
        "send",
        run_id[:8],
        "--store",
        url,
        "--event",
        "REJECT",
        "--machines",
        "mine",
        cwd=tmp_path,
    )
    assert ended.returncode != 0 and "ended" in ended.stderr
    unknown = console(
        "runs",
        "send",
        "--store",
        url,
        "--workflow",
        "approval",
        "--key",
        "x",
        "--event",
        "REJECT",
        "--machines",
        "mine",
        cwd=tmp_path,
    )
    assert unknown.returncode != 0 and "no run of 'approval' with key 'x'" in unknown.stderr
    nothing = console("runs", "show", "ffff", "--store", url, cwd=tmp_path)
    assert "no run with id 'ffff' or an id starting with it" in nothing.stderr
    store.close()


def test_runs_send_refuses_an_event_no_state_of_the_machine_takes(tmp_path: Path) -> None:
    """`runs send --event SHIPED` (a typo) is refused as the ingress refuses it (422), and
    nothing is queued; an event the machine takes in some other state is queued."""
    (tmp_path / "mine.py").write_text("from tests.persistence.workflows import approval\n")
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    assert console("db", "upgrade", "--store", url, cwd=tmp_path).returncode == 0
    started = console(
        "runs", "start", "approval", "--store", url, "--machines", "mine", cwd=tmp_path
    )
    run_id = started.stdout.split()[0]
    typo = console(
        "runs",
        "send",
        run_id,
        "--store",
        url,
        "--machines",
        "mine",
        "--event",
        "APROVE",
        cwd=tmp_path,
    )
    assert typo.returncode != 0
    assert f"{run_id}: no state of 'approval' accepts 'APROVE'; nothing queued" in typo.stderr
    store = open_store(url)
    assert store.pending_events(run_id) == []
    store.close()
    known = console(
        "runs",
        "send",
        run_id,
        "--store",
        url,
        "--machines",
        "mine",
        "--event",
        "APPROVE",
        cwd=tmp_path,
    )
    assert known.returncode == 0 and "queued" in known.stdout


def test_read_only_commands_never_create_a_database_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'typo.db'}"
    for args in (
        ("runs", "list"),
        ("runs", "show", "abcd"),
        ("runs", "cancel", "abcd"),
        ("runs", "send", "abcd", "--event", "GO", "--machines", "mine"),
    ):
        result = console(*args, "--store", url, cwd=tmp_path)
        assert result.returncode != 0 and "no database at" in result.stderr
        assert "statecharts db upgrade --store" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_unreachable_postgresql_is_one_line_with_the_cause(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = console("runs", "list", "--store", f"postgresql://127.0.0.1:{port}/test", cwd=tmp_path)
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert f"cannot reach PostgreSQL at 127.0.0.1:{port}" in result.stderr
    assert "refused" in result.stderr.lower()


def _without(tmp_path: Path, module: str) -> str:
    """A folder to put first on the path where importing `module` fails as if not installed."""
    blocked = tmp_path / "blocked"
    (blocked / module).mkdir(parents=True)
    (blocked / module / "__init__.py").write_text(
        f"raise ModuleNotFoundError({f'No module named {module!r}'!r}, name={module!r})\n"
    )
    return str(blocked)


def test_a_missing_extra_is_reported_with_its_pip_install_line(tmp_path: Path) -> None:
    no_psycopg = _without(tmp_path, "psycopg")
    pg = console(
        "runs",
        "list",
        "--store",
        "postgresql://localhost/test",
        cwd=tmp_path,
        extra_path=no_psycopg,
    )
    assert pg.returncode != 0 and "Traceback" not in pg.stderr
    assert "pip install 'statecharts[postgres]'" in pg.stderr
    no_fastapi = _without(tmp_path / "f", "fastapi")
    api = console(
        "api",
        "--store",
        "sqlite:///x.db",
        "--machines",
        "tests.persistence.workflows",
        cwd=tmp_path,
        extra_path=no_fastapi,
    )
    assert api.returncode != 0 and "Traceback" not in api.stderr
    assert "pip install 'statecharts[ui]'" in api.stderr
    (tmp_path / "props.py").write_text("import hypothesis\n")
    no_hypothesis = _without(tmp_path / "h", "hypothesis")
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    assert console("db", "upgrade", "--store", url, cwd=tmp_path).returncode == 0
    testing = console(
        "runs",
        "start",
        "x",
        "--store",
        url,
        "--machines",
        "props",
        cwd=tmp_path,
        extra_path=no_hypothesis,
    )
    assert "pip install 'statecharts[testing]'" in testing.stderr
    assert "Traceback" not in testing.stderr


def test_statecharts_api_serves_the_ingress_and_refuses_other_hosts_without_a_token(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    assert console("db", "upgrade", "--store", url, cwd=tmp_path).returncode == 0
    command = ("api", "--store", url, "--machines", "tests.persistence.workflows")
    exposed = console(*command, "--host", "0.0.0.0", cwd=tmp_path)
    assert exposed.returncode != 0 and "STATECHARTS_API_TOKEN" in exposed.stderr
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CRM_SECRET": "whsec-1"}
    server = subprocess.Popen(
        [
            str(STATECHARTS),
            *command,
            "--port",
            str(port),
            "--signature",
            "approval=CRM_SECRET@X-CRM-Signature",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{base}/openapi.json", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and server.poll() is None, "api did not start"
                time.sleep(0.1)
        body = orjson.dumps({"key": "deal-1", "input": {"amount": 1}})
        unsigned = httpx.post(f"{base}/api/workflows/approval/runs", content=body)
        assert unsigned.status_code == 401
        signature = Signature("whsec-1").sign(body)
        signed = httpx.post(
            f"{base}/api/workflows/approval/runs",
            content=body,
            headers={"X-CRM-Signature": signature},
        )
        assert signed.status_code == 201 and signed.json()["key"] == "deal-1"
    finally:
        server.terminate()
        server.wait(10)


def test_runs_show_lists_a_runs_children_and_its_parent(tmp_path: Path) -> None:
    from machines.orders import order

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = open_store(url, migrate=True)
    runtime = Runtime(store, [order])
    run_id = runtime.start("order", {"order_id": 1, "card": "review", "amount": 3}, key="o-1")
    Worker(runtime).run_until_idle()
    shown = orjson.loads(cli("runs", "show", "--store", url, run_id).stdout)
    (payment,) = shown["children"]
    assert (payment["workflow_name"], payment["invoke"], payment["key"], payment["status"]) == (
        "payment",
        "payment",
        "o-1/payment",
        "active",
    )
    child = orjson.loads(cli("runs", "show", "--store", url, payment["id"]).stdout)
    assert (child["parent_run_id"], child["parent_invoke_id"]) == (run_id, "payment")
    assert [c["state"] for c in child["children"]] == ["awaiting_review"]
    store.close()


def _open_pools() -> list[object]:
    import gc

    import psycopg_pool

    gc.collect()
    return [
        o for o in gc.get_objects() if isinstance(o, psycopg_pool.ConnectionPool) and not o.closed
    ]


def test_commands_run_in_process_close_the_stores_they_open(pg_dsn: str, pg_schema: str) -> None:
    """`main([...])` in a long-lived process (a script, a test, a notebook): each command closes
    its store's connection pool whether it succeeds or refuses (SystemExit), instead of leaving
    the pool and its threads for the garbage collector, which then fails to join a pool thread
    from that very thread."""
    from persistence.cli import main as cli_main

    url = f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}schema={pg_schema}"
    machines = "tests.persistence.workflows:approval"
    before = len(_open_pools())
    assert cli_main(["db", "upgrade", "--store", url]) == 0
    assert cli_main(["runs", "start", "approval", "--store", url, "--machines", machines]) == 0
    assert cli_main(["runs", "list", "--store", url]) == 0
    with pytest.raises(SystemExit, match="no run"):
        cli_main(["runs", "resume", "00000000", "--store", url, "--machines", machines])
    with pytest.raises(SystemExit, match="no run"):
        cli_main(["runs", "cancel", "00000000", "--store", url])
    assert len(_open_pools()) == before
