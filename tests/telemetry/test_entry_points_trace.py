"""Issue 44: runs started over HTTP (`statecharts api`) and by `runs start` continue the
caller's trace, as `Runtime.start(traceparent=...)` does: the ingress takes the request's
`traceparent` header (an invalid one is ignored, as W3C says), `runs start` takes
`--traceparent` or `$TRACEPARENT`. On SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from persistence.cli import main as cli_main
from persistence.runtime import Runtime
from persistence.stores import Store
from statecharts.tracing import trace_id_of
from tests.persistence.workflows import approval

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from persistence.ingress import create_api

WEBHOOK = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
SHELL = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture(params=["sqlite", "postgres"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_the_http_api_continues_the_request_s_trace(store: Store) -> None:
    runtime = Runtime(store, [approval])
    client = TestClient(create_api(runtime))
    started = client.post(
        "/api/workflows/approval/runs", json={"key": "inv-1"}, headers={"traceparent": WEBHOOK}
    )
    assert started.status_code == 201, started.text
    run = store.get_run(started.json()["id"])
    assert trace_id_of(run.traceparent) == trace_id_of(WEBHOOK)  # one trace, the webhook's
    sent = client.post(
        "/api/workflows/approval/runs/inv-1/events",
        json={"type": "APPROVE", "by": "ann"},
        headers={"traceparent": SHELL},
    )
    assert sent.status_code == 202, sent.text
    assert [trace_id_of(e.traceparent) for e in store.pending_events(run.id)] in (
        [trace_id_of(SHELL)],
        [],
    )  # queued with the sender's trace (or applied at once)
    other = client.post(
        "/api/workflows/approval/runs",
        json={"key": "inv-2"},
        headers={"traceparent": "not-a-traceparent"},
    )
    assert other.status_code == 201, other.text  # ignored, not refused
    assert store.get_run(other.json()["id"]).traceparent is None


def test_runs_start_continues_the_given_or_the_environment_s_trace(
    store: Store,
    store_kind: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "mine.py").write_text("from tests.persistence.workflows import approval\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    if store_kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'runs.db'}"
    else:
        dsn = request.getfixturevalue("pg_dsn")
        url = f"{dsn}{'&' if '?' in dsn else '?'}schema={request.getfixturevalue('pg_schema')}"
    start = ["runs", "start", "approval", "--store", url, "--machines", "mine"]
    assert cli_main([*start, "--key", "a", "--traceparent", WEBHOOK]) == 0
    monkeypatch.setenv("TRACEPARENT", SHELL)
    assert cli_main([*start, "--key", "b"]) == 0
    ids = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert [trace_id_of(store.get_run(i).traceparent) for i in ids] == [
        trace_id_of(WEBHOOK),
        trace_id_of(SHELL),
    ]
    with pytest.raises(SystemExit, match="--traceparent: 'nope' is not a W3C traceparent"):
        cli_main([*start, "--key", "c", "--traceparent", "nope"])
