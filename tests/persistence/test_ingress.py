"""The webhook ingress over a real uvicorn server on loopback, on SQLite and PostgreSQL: every
route's status codes, the bearer token, signatures accepted and refused, body checks, and an
idempotent start under 20 concurrent identical requests."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import orjson
import pytest
from fastapi import FastAPI

from persistence.ingress import Signature, create_api
from persistence.runtime import Runtime
from persistence.stores import Store
from persistence.worker import Worker
from tests.persistence.conftest import Serve
from tests.persistence.workflows import approval


@pytest.fixture(params=("sqlite", "postgres"))
def store_kind(request: pytest.FixtureRequest) -> str:
    """The ingress runs on the two durable stores."""
    return str(request.param)


@pytest.fixture
def runtime(store: Store) -> Runtime:
    return Runtime(store, [approval])


def test_start_is_idempotent_by_key_and_runs_read_by_id_and_key(
    runtime: Runtime, serve: Serve
) -> None:
    base = serve(create_api(runtime))
    body = {"key": "deal-1", "input": {"amount": 5}}
    first = httpx.post(f"{base}/api/workflows/approval/runs", json=body)
    assert first.status_code == 201
    run = first.json()
    assert (run["workflow_name"], run["key"], run["status"]) == ("approval", "deal-1", "active")
    again = httpx.post(f"{base}/api/workflows/approval/runs", json=body)
    assert again.status_code == 200 and again.json()["id"] == run["id"]
    assert httpx.get(f"{base}/api/runs/{run['id']}").json()["id"] == run["id"]
    by_key = httpx.get(f"{base}/api/workflows/approval/runs/deal-1")
    assert by_key.status_code == 200 and by_key.json()["id"] == run["id"]
    assert httpx.get(f"{base}/api/workflows/approval/runs/deal-2").status_code == 404
    assert httpx.get(f"{base}/api/runs/no-such-run").status_code == 404
    unknown = httpx.post(f"{base}/api/workflows/aproval/runs", json=body)
    assert unknown.status_code == 404 and "no workflow named 'aproval'" in unknown.text
    bad_key = httpx.post(f"{base}/api/workflows/approval/runs", json={"key": 7})
    assert bad_key.status_code == 422 and bad_key.json()["detail"][0]["loc"] == ["body", "key"]
    assert len(runtime.list(key="deal-1")) == 1


def test_twenty_concurrent_identical_starts_make_one_run(runtime: Runtime, serve: Serve) -> None:
    base = serve(create_api(runtime))
    body = {"key": "charge-20", "input": {"amount": 20}}
    with httpx.Client() as client, ThreadPoolExecutor(20) as pool:
        barrier = threading.Barrier(20)

        def post(_: int) -> httpx.Response:
            barrier.wait(10)
            return client.post(f"{base}/api/workflows/approval/runs", json=body, timeout=30)

        answers = list(pool.map(post, range(20)))
    codes = sorted(a.status_code for a in answers)
    assert codes == [200] * 19 + [201]
    assert len({a.json()["id"] for a in answers}) == 1
    assert len(runtime.list(key="charge-20")) == 1


def test_events_are_queued_by_key_and_id_and_refused_with_the_reason(
    runtime: Runtime, serve: Serve
) -> None:
    base = serve(create_api(runtime, max_body=2_000))
    run_id = runtime.start("approval", key="inv-9")
    events = f"{base}/api/workflows/approval/runs/inv-9/events"
    not_accepted = httpx.post(events, json={"type": "PAY"})
    assert not_accepted.status_code == 422
    assert not_accepted.json()["detail"][0]["loc"] == ["body", "type"]
    assert "no state of 'approval' accepts 'PAY'" in not_accepted.text
    poison = httpx.post(events, json={"type": "APPROVE", "by": {"name": "a\x00b"}})
    assert poison.status_code == 422 and poison.json()["detail"][0]["loc"] == ["body", "by", "name"]
    reserved = httpx.post(events, json={"type": "xstate.after.1.approval.waiting"})
    assert reserved.status_code == 422 and "reserved" in reserved.text
    not_json = httpx.post(events, content=b"{type: APPROVE}")
    assert not_json.status_code == 422 and "not JSON" in not_json.text
    assert httpx.post(events, json=["APPROVE"]).status_code == 422
    too_big = httpx.post(events, json={"type": "APPROVE", "by": "x" * 3_000})
    assert too_big.status_code == 413
    assert runtime.store.pending_events(run_id) == []  # nothing refused was queued
    unknown = httpx.post(f"{base}/api/workflows/approval/runs/inv-0/events", json={"type": "X"})
    assert unknown.status_code == 404 and "key 'inv-0'" in unknown.text
    assert httpx.post(f"{base}/api/runs/nope/events", json={"type": "X"}).status_code == 404

    queued = httpx.post(events, json={"type": "APPROVE", "by": "ann"})
    assert queued.status_code == 202 and queued.json()["id"] == run_id
    assert queued.json()["inbox_id"] >= 1
    Worker(runtime).run_until_idle()
    assert runtime.snapshot(run_id).context["approved_by"] == "ann"
    assert runtime.get(run_id).status == "done"
    ended = httpx.post(events, json={"type": "REJECT"})
    assert ended.status_code == 409 and "has ended (done)" in ended.text
    by_id = httpx.post(f"{base}/api/runs/{run_id}/events", json={"type": "REJECT"})
    assert by_id.status_code == 409

    other = runtime.start("approval", key="inv-10")
    by_id = httpx.post(f"{base}/api/runs/{other}/events", json={"type": "REJECT"})
    assert by_id.status_code == 202
    Worker(runtime).run_until_idle()
    assert runtime.get(other).state == "rejected"


def test_the_bearer_token_is_required_when_set(runtime: Runtime, serve: Serve) -> None:
    base = serve(create_api(runtime, token="s3cret-token"))
    url = f"{base}/api/workflows/approval/runs"
    missing = httpx.post(url, json={"key": "a"})
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    wrong = httpx.post(url, json={"key": "a"}, headers={"Authorization": "Bearer s3cret"})
    assert wrong.status_code == 401
    assert httpx.get(f"{base}/api/workflows/approval/runs/a").status_code == 401
    assert runtime.list() == []
    good = {"Authorization": "Bearer s3cret-token"}
    assert httpx.post(url, json={"key": "a"}, headers=good).status_code == 201
    assert httpx.get(f"{base}/api/workflows/approval/runs/a", headers=good).status_code == 200


def test_mounted_in_an_app_of_ones_own_the_token_still_guards_every_route(
    runtime: Runtime, serve: Serve
) -> None:
    outer = FastAPI()
    outer.mount("/hooks", create_api(runtime, token="s3cret-token"))
    base = serve(outer) + "/hooks"
    url = f"{base}/api/workflows/approval/runs"
    assert httpx.post(url, json={"key": "m"}).status_code == 401
    assert httpx.get(f"{base}/api/runs/x").status_code == 401
    good = {"Authorization": "Bearer s3cret-token"}
    assert httpx.post(url, json={"key": "m"}, headers=good).status_code == 201
    assert httpx.get(f"{base}/openapi.json").status_code == 200


def test_signed_workflows_accept_only_the_right_signature_of_the_raw_body(
    runtime: Runtime, serve: Serve
) -> None:
    signature = Signature("whsec-crm", header="X-Hub-Signature-256")
    base = serve(create_api(runtime, signatures={"approval": signature}))
    url = f"{base}/api/workflows/approval/runs"
    raw = orjson.dumps({"key": "deal-5", "input": {"from": "crm"}})
    assert httpx.post(url, content=raw).status_code == 401
    forged = Signature("guessed").sign(raw)
    refused = httpx.post(url, content=raw, headers={"X-Hub-Signature-256": forged})
    assert refused.status_code == 401 and "X-Hub-Signature-256" in refused.text
    tampered = raw.replace(b"crm", b"CRM")
    assert (
        httpx.post(
            url, content=tampered, headers={"X-Hub-Signature-256": signature.sign(raw)}
        ).status_code
        == 401
    )
    assert runtime.list() == []
    signed = httpx.post(url, content=raw, headers={"X-Hub-Signature-256": signature.sign(raw)})
    assert signed.status_code == 201
    assert signature.sign(raw).startswith("sha256=")
    event = orjson.dumps({"type": "APPROVE", "by": "crm"})
    run_events = f"{base}/api/runs/{signed.json()['id']}/events"
    assert httpx.post(run_events, content=event).status_code == 401  # by id: same secret
    assert (
        httpx.post(
            run_events, content=event, headers={"X-Hub-Signature-256": signature.sign(event)}
        ).status_code
        == 202
    )


def test_the_openapi_document_lists_every_route_with_examples(
    runtime: Runtime, serve: Serve
) -> None:
    base = serve(create_api(runtime, token="t0ken"))
    assert httpx.get(f"{base}/openapi.json").status_code == 200  # the document is public
    document = httpx.get(f"{base}/openapi.json").json()
    assert set(document["paths"]) == {
        "/api/workflows/{name}/runs",
        "/api/workflows/{name}/runs/{key}/events",
        "/api/runs/{run_id}/events",
        "/api/runs/{run_id}",
        "/api/workflows/{name}/runs/{key}",
    }
    start = document["paths"]["/api/workflows/{name}/runs"]["post"]
    example = start["requestBody"]["content"]["application/json"]["examples"]["webhook"]
    assert example["value"]["key"] == "deal-42"
    assert {"200", "201", "404", "422"} <= set(start["responses"])
    assert document["security"] == [{"bearer": []}, {"header": []}]
    assert "STATECHARTS_API_TOKEN" in str(document["components"]["securitySchemes"])
