"""No request a client can send makes the ingress or the UI answer 5xx (issue 44, item 2):
Hypothesis drives every route of both apps, served by uvicorn on loopback, with generated
bodies, keys, ids, inputs, events, query strings and forms, on SQLite and PostgreSQL (a
bounded number of examples: seconds, not minutes). Webhook providers retry a 500 for ever;
what the client got wrong must be a 4xx naming it."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from persistence.ingress import create_api
from persistence.runtime import Runtime
from persistence.stores import Store
from persistence.ui.app import create_app
from persistence.ui.security import CSRF_COOKIE
from tests.persistence.conftest import Serve
from tests.persistence.workflows import approval, fulfilment, payments

MACHINES = [approval, payments, fulfilment]
EXAMPLES = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# text a URL or a form can carry (no lone surrogates: they have no UTF-8), NUL included
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
NAMES = st.one_of(st.sampled_from(["approval", "payments", "fulfilment", "", "no_such"]), TEXT)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=12,
)
EVENT_TYPES = st.one_of(
    st.sampled_from(
        [
            "APPROVE",
            "REJECT",
            "SHIP",
            "CLOSE",
            "payment_intent.succeeded",
            "xstate.init",
            "statecharts.cancel",
            "",
        ]
    ),
    TEXT,
)


@pytest.fixture(params=("sqlite", "postgres"))
def store_kind(request: pytest.FixtureRequest) -> str:
    """Both durable stores."""
    return str(request.param)


def _runs(runtime: Runtime) -> list[str]:
    """Runs to aim at: active ones of each workflow and an ended one."""
    ids = [
        runtime.start("approval", key="a-1"),
        runtime.start("payments", key="p-1"),
        runtime.start("fulfilment", {"order_id": 1}, key="f-1"),
    ]
    ended = runtime.start("approval", key="a-2")
    runtime.send(ended, {"type": "REJECT"})
    return [*ids, ended]


def _body(data: st.DataObject) -> dict[str, Any]:
    """Request content: bytes, JSON of any shape, or a start's or an event's object with
    generated fields (a key, an input, an event type and its data)."""
    kind = data.draw(st.sampled_from(["bytes", "json", "start", "event"]))
    if kind == "bytes":
        return {"content": data.draw(st.binary(max_size=64))}
    if kind == "json":
        return {"content": _json(data.draw(JSON))}
    if kind == "start":
        fields = {"key": data.draw(st.one_of(TEXT, JSON)), "input": data.draw(JSON)}
        if data.draw(st.booleans()):
            fields["input"] = {"order_id": data.draw(JSON)}
    else:
        fields = {
            **data.draw(st.dictionaries(TEXT, JSON, max_size=3)),
            "type": data.draw(EVENT_TYPES),
        }
    return {"content": _json(fields)}


def _json(value: Any) -> bytes:
    """`value` as a client would send it: integers beyond 64 bits included (which orjson, the
    apps' own parser, refuses to write: the test raised before sending them)."""
    return json.dumps(value, ensure_ascii=False).encode()


def _headers(data: st.DataObject) -> dict[str, str]:
    chosen = data.draw(
        st.dictionaries(
            st.sampled_from(["Idempotency-Key", "Authorization", "Content-Type"]),
            st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=210),
            max_size=2,
        )
    )
    return chosen


def test_no_ingress_route_answers_5xx_for_anything_a_client_sends(
    store: Store, serve: Serve
) -> None:
    runtime = Runtime(store, MACHINES)
    runs = _runs(runtime)
    base = serve(create_api(runtime, max_body=4_096))
    client = httpx.Client(base_url=base, timeout=30)

    @EXAMPLES
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        route = data.draw(st.sampled_from(["start", "by_key", "by_id", "get", "get_by_key"]))
        name, key = (
            data.draw(NAMES),
            data.draw(st.one_of(st.sampled_from(["a-1", "p-1", "f-1", "a-2"]), TEXT)),
        )
        run_id = data.draw(st.one_of(st.sampled_from(runs), TEXT))
        post = {**_body(data), "headers": _headers(data)}
        if route == "start":
            answer = client.post(f"/api/workflows/{_seg(name)}/runs", **post)
        elif route == "by_key":
            answer = client.post(f"/api/workflows/{_seg(name)}/runs/{_seg(key)}/events", **post)
        elif route == "by_id":
            answer = client.post(f"/api/runs/{_seg(run_id)}/events", **post)
        elif route == "get":
            answer = client.get(f"/api/runs/{_seg(run_id)}")
        else:
            answer = client.get(f"/api/workflows/{_seg(name)}/runs/{_seg(key)}")
        assert answer.status_code < 500, (route, answer.status_code, answer.text[:300])

    try:
        check()
    finally:
        client.close()


def test_no_ui_route_answers_5xx_for_anything_a_client_sends(store: Store, serve: Serve) -> None:
    runtime = Runtime(store, MACHINES)
    runs = _runs(runtime)
    base = serve(create_app(store, MACHINES))
    client = httpx.Client(base_url=base, timeout=30)
    csrf = client.get("/").cookies[CSRF_COOKIE]  # a browser's: the forms reach their handlers
    queries = st.dictionaries(
        st.sampled_from(["workflow", "status", "state", "key", "age", "page", "page_size", "done"]),
        TEXT,
        max_size=4,
    )

    @EXAMPLES
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        route = data.draw(
            st.sampled_from(
                [
                    "runs",
                    "run",
                    "workflows",
                    "workflow",
                    "limits",
                    "send",
                    "retry",
                    "cancel",
                    "resume",
                    "login",
                    "login_post",
                    "logout",
                    "api_runs",
                    "api_run",
                ]
            )
        )
        run_id = _seg(data.draw(st.one_of(st.sampled_from(runs), TEXT)))
        params = data.draw(queries)
        form = {
            "csrf_token": data.draw(st.one_of(st.just(csrf), TEXT)),
            **data.draw(
                st.dictionaries(
                    st.sampled_from(
                        ["event_type", "payload", "timer_id", "reason", "token", "next"]
                    ),
                    st.one_of(TEXT, JSON.map(lambda v: _json(v).decode())),
                    max_size=4,
                )
            ),
        }
        gets = {
            "runs": "/",
            "run": f"/runs/{run_id}",
            "workflows": "/workflows",
            "workflow": f"/workflows/{_seg(data.draw(NAMES))}",
            "limits": "/limits",
            "login": "/login",
            "api_runs": "/api/runs",
            "api_run": f"/api/runs/{run_id}",
        }
        posts = {
            "send": f"/runs/{run_id}/send",
            "retry": f"/runs/{run_id}/retry",
            "cancel": f"/runs/{run_id}/cancel",
            "resume": f"/runs/{run_id}/resume",
            "login_post": "/login",
            "logout": "/logout",
        }
        if route in gets:
            answer = client.get(gets[route], params=params)
        else:
            answer = client.post(posts[route], data=form, params=params)
        assert answer.status_code < 500, (route, answer.status_code, answer.text[:300])

    try:
        check()
    finally:
        client.close()


def _seg(text: str) -> str:
    """`text` as one URL path segment (every byte but unreserved ones escaped)."""
    return "".join(
        c
        if c.isascii() and (c.isalnum() or c in "-._~")
        else "".join(f"%{b:02X}" for b in c.encode())
        for c in text
    )
