"""The persistence CLI, run as real subprocesses against a real SQLite file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson

from persistence.runtime import Runtime
from persistence.stores import open_store
from persistence.worker import Worker
from tests.persistence.workflows import approval

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "persistence.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_db_upgrade_then_runs_list_show_cancel(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    refused = cli("runs", "list", "--store", url)
    assert refused.returncode != 0 and "statecharts db upgrade --store" in refused.stderr
    upgraded = cli("db", "upgrade", "--store", url)
    assert upgraded.returncode == 0 and "schema at version 3" in upgraded.stdout
    assert "already at version 3" in cli("db", "upgrade", "--store", url).stdout

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
        [sys.executable, "-m", "persistence.cli", "runs", "versions", "--store", url,
         "--machines", "v2machines"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": env_path}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert f"approval  version {approval.fingerprint}" in result.stdout and "1 active run" in (
        result.stdout
    )
    bad = cli("worker", "--store", url, "--machines", "no.such.module")
    assert bad.returncode != 0 and "cannot import 'no.such.module'" in bad.stderr
    store.close()
