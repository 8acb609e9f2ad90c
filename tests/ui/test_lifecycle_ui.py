"""The run page's fork and reset buttons on the journal rows (issue 41), through the app in
process over a real SQLite store, with the UI's CSRF protection."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

with warnings.catch_warnings():  # starlette's note that it prefers httpx2 to httpx; both work
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

from persistence.runtime import Runtime
from persistence.stores import Store, open_store
from persistence.ui import create_app
from persistence.worker import Worker
from tests.persistence.retention_workflows import BUG, MACHINES


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(f"sqlite:///{tmp_path / 'runs.db'}", migrate=True)
    yield opened
    opened.close()


def _form(html: str, action: str, step: int) -> bool:
    """Whether the page has the form posting to `action` for journal step `step`."""
    return (
        re.search(
            rf'action="{re.escape(action)}"[^>]*><input type="hidden" '
            rf'name="csrf_token" value="[^"]+"><input type="hidden" name="step" '
            rf'value="{step}">',
            html,
        )
        is not None
    )


def test_fork_and_reset_from_a_journal_row(store: Store) -> None:
    runtime = Runtime(store, MACHINES)
    run_id = runtime.start("lc_order")
    Worker(runtime).run_until_idle()
    BUG["pack"] = True
    try:
        runtime.send(run_id, "PACK")
        Worker(runtime).run_until_idle()
    finally:
        BUG["pack"] = False
    assert runtime.get(run_id).status == "error"
    with TestClient(create_app(store, MACHINES)) as client:
        page = client.get(f"/runs/{run_id}").text
        token = re.search(r'name="csrf_token" value="([^"]+)"', page)
        assert token is not None
        assert _form(page, f"/runs/{run_id}/fork", 2) and _form(page, f"/runs/{run_id}/reset", 2)
        forged = client.post(f"/runs/{run_id}/fork", data={"step": 2, "csrf_token": "x" * 40})
        assert forged.status_code == 403 and runtime.store.fork_of(run_id) is None

        forked = client.post(
            f"/runs/{run_id}/fork",
            data={"step": 2, "csrf_token": token.group(1)},
            follow_redirects=False,
        )
        assert forked.status_code == 303
        fork_id = forked.headers["location"].split("/runs/")[1].split("?")[0]
        assert fork_id != run_id and runtime.get(fork_id).state == "shipping"
        fork_page = client.get(forked.headers["location"]).text
        assert "forked from" in fork_page and f'href="/runs/{run_id}"' in fork_page
        assert 'action="/runs/' + fork_id + '/reset"' not in fork_page  # it has not failed

        refused = client.post(
            f"/runs/{run_id}/reset", data={"step": 99, "csrf_token": token.group(1)}
        )
        assert refused.status_code == 409 and "Not reset" in refused.text
        reset = client.post(
            f"/runs/{run_id}/reset",
            data={"step": 3, "csrf_token": token.group(1)},
            follow_redirects=False,
        )
        assert reset.status_code == 303 and reset.headers["location"].endswith("done=reset")
        assert (runtime.get(run_id).status, runtime.get(run_id).state) == ("active", "packing")
