"""Issue 44, the on-call view: a run that went on after an error (finished, or healthy again)
does not show that error in red, in the UI or in `runs list`; a failed run's page links to the
error-workflow run its failure started. On SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from persistence.cli import main as cli_main
from persistence.runtime import Runtime
from persistence.stores import Store
from persistence.worker import Worker
from statecharts import SimulatedClock, create_machine

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from persistence.ui import create_app


@pytest.fixture(params=["sqlite", "postgres"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """The stores an operator's UI runs on (the in-memory one has no URL for the CLI)."""
    return str(request.param)


@pytest.fixture
def clock() -> SimulatedClock:
    """A clock at a fixed instant (the runs' times are not what this checks)."""
    return SimulatedClock(START_MS)


@pytest.fixture
def store_url(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """The URL of the `store` fixture's database, for the command line."""
    if store_kind == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    dsn, schema = request.getfixturevalue("pg_dsn"), request.getfixturevalue("pg_schema")
    return f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"


START_MS = 1_700_000_000_000


def machines() -> list[Any]:
    tries: dict[str, int] = {}

    def flaky(order: Any, idempotency_key: str) -> str:  # each call fails once, then answers
        tries[idempotency_key] = tries.get(idempotency_key, 0) + 1
        if tries[idempotency_key] == 1:
            raise ConnectionError("bank timeout")
        return "ok"

    def declined(order: Any) -> str:
        raise ValueError("card declined by issuer")

    order = create_machine(
        {"id": "order", "initial": "paying", "meta": {"error_workflow": "order_failed"},
         "context": {"order": None},
         "states": {
             "paying": {"on": {"PAY": "charging", "DECLINE": "declining"}},
             "charging": {"invoke": {"src": "flaky", "input": "o-1", "onDone": "shipping",
                                     "retry": {"max_attempts": 3, "initial_interval": 0}}},
             "declining": {"invoke": {"src": "declined", "onDone": "shipping"}},
             "shipping": {"on": {"SHIPPED": "done"}},
             "done": {"type": "final"}}},
        actors={"flaky": flaky, "declined": declined})  # fmt: skip
    alert = create_machine({"id": "order_failed", "initial": "noted",
                            "states": {"noted": {"type": "final"}}})
    return [order, alert]


def test_an_error_the_run_went_on_after_is_not_shown_as_current(
        store: Store, clock: SimulatedClock, store_url: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    runtime = Runtime(store, machines(), clock=clock)
    healthy, done, failed = (runtime.start("order") for _ in range(3))
    for run_id in (healthy, done):
        runtime.send(run_id, "PAY")
    runtime.send(failed, "DECLINE")
    Worker(runtime).run_until_idle()
    runtime.send(done, "SHIPPED")
    Worker(runtime).run_until_idle()
    assert runtime.get(healthy).state == "shipping" and runtime.get(done).status == "done"
    assert runtime.get(healthy).last_error == "ConnectionError: bank timeout"  # the history
    assert runtime.get(failed).status == "error"

    client = TestClient(create_app(store, machines()))
    listing = client.get("/?workflow=order").text
    for run_id in (healthy, done):
        row = listing[listing.index(f'data-run="{run_id}"'):]
        row = row[:row.index("</tr>")]
        assert 'class="err"' not in row and 'class="earlier-err dim"' in row, row
    failed_row = listing[listing.index(f'data-run="{failed}"'):]
    assert 'class="err"' in failed_row[:failed_row.index("</tr>")]
    page = client.get(f"/runs/{done}").text
    assert 'class="err-box" id="last-error"' not in page and "Earlier error" in page

    failed_page = client.get(f"/runs/{failed}").text
    [alert] = runtime.list(name="order_failed")
    assert f'<a href="/runs/{alert.id}">order_failed run {alert.id[:8]}</a>' in failed_page

    assert cli_main(["runs", "list", "--store", store_url, "--name", "order"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "earlier_error=ConnectionError: bank timeout" in lines[healthy]
    assert "earlier_error=" in lines[done] and "last_error=" not in lines[done]
    assert "last_error=ValueError: card declined by issuer" in lines[failed]
