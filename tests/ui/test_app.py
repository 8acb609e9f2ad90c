"""The web app in process (FastAPI's test client) over real stores: filters and paging, the JSON
API and its OpenAPI schema, the heat map, CSRF, bad input, and the `ui` command's refusals."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
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
from persistence.ui.security import CSRF_COOKIE
from persistence.worker import Worker
from statecharts import SimulatedClock
from tests.ui.demo import MACHINES, ORDER, Demo, fill
from tests.ui.processes import ROOT

T0 = 1_800_000_000_000


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Demo]:
    url = f"sqlite:///{tmp_path_factory.mktemp('app') / 'runs.db'}"
    return url, fill(url)


@pytest.fixture
def client(demo_db: tuple[str, Demo]) -> Iterator[TestClient]:
    store = open_store(demo_db[0])
    with TestClient(create_app(store, MACHINES)) as c:
        yield c
    store.close()


def csrf(client: TestClient, path: str) -> str:
    """The CSRF value a page's forms carry (and the cookie it set)."""
    html = client.get(path).text
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, "the page has no CSRF field"
    return found.group(1)


def test_list_filters_by_status_workflow_key_and_pages(store: Store) -> None:
    clock = SimulatedClock(T0)
    runtime = Runtime(store, MACHINES, clock=clock)
    ids = []
    for i in range(120):
        clock.advance(1000)
        ids.append(runtime.start("order", {"customer": f"c{i}"}, key=f"k{i}"))
    runtime.cancel(ids[5], "test")
    app = create_app(store, MACHINES, clock=clock)
    with TestClient(app) as c:
        page1 = c.get("/api/runs", params={"page_size": 50}).json()
        assert (page1["total"], len(page1["runs"])) == (120, 50)
        assert page1["counts"] == {"active": 119, "cancelled": 1}
        assert [r["id"] for r in page1["runs"]] == ids[::-1][:50]  # newest first
        page3 = c.get("/api/runs", params={"page_size": 50, "page": 3}).json()
        assert [r["id"] for r in page3["runs"]] == ids[::-1][100:]
        assert c.get("/api/runs", params={"status": "cancelled"}).json()["runs"][0]["id"] == ids[5]
        assert [r["id"] for r in c.get("/api/runs", params={"key": "k7"}).json()["runs"]] == [
            ids[7]
        ]
        assert c.get("/api/runs", params={"workflow": "onboarding"}).json()["total"] == 0
        html = c.get("/", params={"status": "active", "page": 2}).text
        assert "119 runs · page 2 of 3" in html
        assert 'rel="prev"' in html and 'rel="next"' in html


def test_age_filter_counts_from_now(store: Store) -> None:
    clock = SimulatedClock(T0)
    runtime = Runtime(store, MACHINES, clock=clock)
    old = runtime.start("order")
    clock.advance(3 * 3_600_000)
    new = runtime.start("order")
    with TestClient(create_app(store, MACHINES, clock=clock)) as c:
        recent = c.get("/api/runs", params={"age": "1h"}).json()["runs"]
        older = c.get("/api/runs", params={"age": "older-1h"}).json()["runs"]
    assert [r["id"] for r in recent] == [new] and [r["id"] for r in older] == [old]


def test_bad_filters_are_refused_naming_the_parameter(client: TestClient) -> None:
    response = client.get("/api/runs", params={"status": "sleeping"})
    assert response.status_code == 422 and "status: unknown run status 'sleeping'" in response.text
    page = client.get("/", params={"age": "forever"})
    assert page.status_code == 422 and "age: unknown age" in page.text
    for path in ("/api/runs", "/"):  # bounded: a huge page number is refused, naming it
        huge = client.get(path, params={"page": "4611686018427387904"})
        assert huge.status_code == 422 and "page" in huge.text
        nul = client.get(path, params={"state": "a\x00b"})  # would match every run on SQLite
        assert nul.status_code == 422 and "state:" in nul.text and "NUL" in nul.text
        long = client.get(path, params={"key": "k" * 501})
        assert long.status_code == 422 and "key: at most 500 characters" in long.text
    last = client.get("/api/runs", params={"page": "1000000"})
    assert last.status_code == 200 and last.json()["runs"] == []


def test_run_api_and_openapi_schema(client: TestClient, demo_db: tuple[str, Demo]) -> None:
    _, demo = demo_db
    run = client.get(f"/api/runs/{demo.retrying}").json()
    assert run["state"] == "charging_card.waiting_to_retry"
    assert run["timers"][0]["retry_of"] == "order.charging_card"
    assert run["attempts"][0]["attempt"] == 1
    assert [j["event"]["type"] for j in run["journal"]][-1] == "PAY"  # oldest last
    assert client.get(f"/api/runs/{uuid.uuid4()}").status_code == 404
    schema = client.get("/openapi.json").json()
    assert {"/api/runs", "/api/runs/{run_id}"} <= set(schema["paths"])
    assert "RunDetailOut" in schema["components"]["schemas"]
    assert not any(p in schema["paths"] for p in ("/", "/runs/{run_id}/send"))  # pages are not API


def test_workflow_page_heat_map_counts_runs_per_state(client: TestClient) -> None:
    html = client.get("/workflows/order").text
    svg = html[html.index("<svg") : html.index("</svg>")]
    badges = dict(re.findall(r'data-state="([^"]+)"[^>]*data-runs="(\d+)"', svg))
    assert badges["awaiting_approval"] == "8" and badges["awaiting_payment"] == "1"
    assert badges["charging_card.waiting_to_retry"] == "1" and badges["shipped"] == "0"
    assert "8 runs" in svg and 'href="/?workflow=order&amp;state=awaiting_approval"' in svg
    assert ORDER.fingerprint[:12] in html  # the version in use


def test_actions_need_the_csrf_value_of_this_browser(
    client: TestClient, demo_db: tuple[str, Demo]
) -> None:
    url, demo = demo_db
    run_id = demo.waiting[3]
    token = csrf(client, f"/runs/{run_id}")
    refused = client.post(
        f"/runs/{run_id}/send", data={"event_type": "APPROVE", "csrf_token": "forged" * 8}
    )
    assert refused.status_code == 403
    cross_site = client.post(
        f"/runs/{run_id}/send",
        data={"event_type": "APPROVE", "csrf_token": token},
        headers={"Origin": "https://evil.example"},
    )
    assert cross_site.status_code == 403
    store = open_store(url)
    assert store.pending_events(run_id) == []
    sent = client.post(
        f"/runs/{run_id}/send",
        data={"event_type": "APPROVE", "payload": '{"by": "ops"}', "csrf_token": token},
        follow_redirects=False,
    )
    assert sent.status_code == 303 and sent.headers["location"] == f"/runs/{run_id}?done=sent"
    assert store.pending_events(run_id) == []  # the run was at rest: the send applied it
    assert store.list_events(run_id)[-1].event == {"type": "APPROVE", "by": "ops"}
    Worker(Runtime(store, MACHINES)).run_until_idle()
    assert store.get_run(run_id).state == "shipped"
    store.close()


@pytest.mark.parametrize(
    ("event_type", "payload", "message"),
    [
        ("", "", "event type: give the event"),
        ("xstate.done.actor.x", "", "internal to the engine"),
        ("statecharts.cancel", "", "internal to the engine"),
        ("APPROVE", "[1, 2]", "payload: must be a JSON object"),
        ("APPROVE", "{oops", "payload: not valid JSON"),
        ("APPROVE", '{"type": "X"}', "must not contain"),
    ],
)
def test_bad_events_are_refused_with_a_clear_message(
    client: TestClient, demo_db: tuple[str, Demo], event_type: str, payload: str, message: str
) -> None:
    run_id = demo_db[1].waiting[4]
    token = csrf(client, f"/runs/{run_id}")
    response = client.post(
        f"/runs/{run_id}/send",
        data={"event_type": event_type or " ", "payload": payload, "csrf_token": token},
    )
    assert response.status_code == 400 and message in response.text


def test_events_to_an_ended_run_are_refused(client: TestClient, demo_db: tuple[str, Demo]) -> None:
    run_id = demo_db[1].failed
    token = csrf(client, f"/runs/{demo_db[1].waiting[5]}")  # an ended run's page has no forms
    response = client.post(f"/runs/{run_id}/send", data={"event_type": "PAY", "csrf_token": token})
    assert response.status_code == 409 and "The run has ended" in response.text
    html = client.get(f"/runs/{run_id}").text
    assert 'id="send"' not in html and "CardDeclined: card declined by issuer" in html


def test_unknown_pages_say_what_is_missing(client: TestClient) -> None:
    response = client.get("/runs/not-a-run")
    assert response.status_code == 404 and "No run has the id &#39;not-a-run&#39;" in response.text
    assert client.get("/workflows/nothing").status_code == 404


def test_without_definitions_the_pages_still_show_runs_but_offer_no_actions(
    demo_db: tuple[str, Demo],
) -> None:
    store = open_store(demo_db[0])
    with TestClient(create_app(store)) as c:
        html = c.get(f"/runs/{demo_db[1].stuck}").text
        assert "awaiting_approval" in html and "--machines" in html and 'id="send"' not in html
        assert "<svg" not in html
    store.close()


def test_every_response_carries_the_security_headers(client: TestClient) -> None:
    response = client.get("/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert response.headers["x-frame-options"] == "DENY"
    assert CSRF_COOKIE in response.cookies


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "persistence.ui.cli", "ui", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **(env or {})},
    )


def test_the_ui_command_refuses_a_public_address_without_a_token(tmp_path: Path) -> None:
    result = run_cli("--store", f"sqlite:///{tmp_path / 'x.db'}", "--host", "0.0.0.0")
    assert result.returncode != 0
    assert "--host 0.0.0.0: listening beyond 127.0.0.1 needs an access token" in result.stderr
    assert "STATECHARTS_UI_TOKEN" in result.stderr


def test_the_ui_command_needs_a_store(tmp_path: Path) -> None:
    result = run_cli()
    assert result.returncode != 0 and "give --store URL or set STATECHARTS_STORE" in result.stderr


def test_the_command_registers_without_the_ui_extra_and_says_what_to_install(
    tmp_path: Path,
) -> None:
    script = (
        "import sys, argparse\n"
        "for name in ('fastapi', 'uvicorn', 'jinja2', 'starlette'):\n"
        "    sys.modules[name] = None  # as if the 'ui' extra were not installed\n"
        "from persistence.ui.cli import register\n"
        "parser = argparse.ArgumentParser()\n"
        "register(parser.add_subparsers(dest='command'))\n"
        f"args = parser.parse_args(['ui', '--store', 'sqlite:///{tmp_path / 'x.db'}'])\n"
        "args.handler(args)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode != 0
    assert "the web UI needs the 'ui' extra" in result.stderr
    assert "pip install 'statecharts[ui]'" in result.stderr


def test_with_a_token_the_schema_says_calls_need_it(demo_db: tuple[str, Demo]) -> None:
    store = open_store(demo_db[0])
    token = "k" * 32
    with TestClient(create_app(store, MACHINES, token=token)) as c:
        assert c.get("/openapi.json").status_code == 401
        schema = c.get("/openapi.json", headers={"Authorization": f"Bearer {token}"}).json()
        assert {"bearer", "header"} <= set(schema["components"]["securitySchemes"])
        assert schema["security"] == [{"bearer": []}, {"header": []}]
        runs = c.get("/api/runs", headers={"X-Statecharts-Token": token}).json()
        assert runs["total"] > 0
    store.close()


def test_a_run_of_an_older_definition_says_so(store: Store) -> None:
    from persistence.stores import NewRun

    old = NewRun(
        id=str(uuid.uuid4()),
        workflow_name="order",
        workflow_version="0ld" * 10,
        key=None,
        state="awaiting_payment",
        snapshot={"context": {}},
    )
    store.create_run(old, [], T0)
    with TestClient(create_app(store, MACHINES)) as c:
        html = c.get(f"/runs/{old.id}").text
        versions = c.get("/workflows/order").text
    assert "older definition" in html and "No loaded definition of order matches" in html
    assert "0ld0ld0ld0ld" in versions and "<svg" in versions  # listed, diagram of the newest


def test_a_long_journal_shows_its_newest_entries_and_the_total(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from persistence.stores import JournalEntry, NewRun, StepCommit
    from persistence.web import runs

    monkeypatch.setattr(runs, "TIMELINE_LIMIT", 3)
    run = NewRun(
        id=str(uuid.uuid4()),
        workflow_name="order",
        workflow_version="v",
        key=None,
        state="awaiting_payment",
        snapshot={"context": {}},
        wake_at=T0,
    )
    store.create_run(run, [], T0)
    version = store.claim_runs("w", T0, 60_000, 10)[0].version
    for n in range(7):
        version = store.commit_step(
            StepCommit(
                run_id=run.id,
                owner="w",
                expected_version=version,
                state="awaiting_payment",
                snapshot={"context": {}},
                status="active",
                release=False,
                journal=[
                    JournalEntry({"type": f"NOTE{n}"}, "awaiting_payment", "awaiting_payment")
                ],
            ),
            T0 + n,
        )
    with TestClient(create_app(store, MACHINES)) as c:
        detail = c.get(f"/api/runs/{run.id}").json()
        html = c.get(f"/runs/{run.id}").text
    assert [j["event"]["type"] for j in detail["journal"]] == ["NOTE6", "NOTE5", "NOTE4"]
    assert detail["journal_total"] == 7
    assert "last 3 of 7" in html


def test_the_run_page_links_parent_and_children_and_draws_the_childs_state(
    store: Store, dot_installed: str
) -> None:
    from machines.orders import order

    clock = SimulatedClock(T0)
    runtime = Runtime(store, [order], clock=clock)
    run_id = runtime.start("order", {"order_id": 1, "card": "review", "amount": 3}, key="o-1")
    Worker(runtime).run_until_idle()
    (payment,) = runtime.children(run_id)
    (fraud,) = runtime.children(payment.id)
    with TestClient(create_app(store, [order], clock=clock)) as c:
        top = c.get(f"/runs/{run_id}").text
        assert f'href="/runs/{payment.id}"' in top and 'id="child-runs"' in top
        # the child's state is drawn in the invoking state's box, linked to the child's page
        box = re.search(r'<g[^>]*data-state="paying"[^>]*>', top)
        assert box is not None and 'data-child-run-state="payment: checking_fraud"' in box[0]
        middle = c.get(f"/runs/{payment.id}").text
        assert f'href="/runs/{run_id}"' in middle and 'child <b class="mono">payment' in middle
        assert 'data-child-run-state="fraud_check: awaiting_review"' in middle
        assert f'href="/runs/{fraud.id}"' in middle
        api = c.get(f"/api/runs/{payment.id}").json()
        assert (api["parent_run_id"], api["parent_invoke_id"]) == (run_id, "payment")
        assert [child["id"] for child in api["children"]] == [fraud.id]
