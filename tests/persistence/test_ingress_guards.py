"""The ingress against replays, strangers, hostile bodies and slow clients (issue 47's R5, R6,
R10, R11, R12, R14; issue 44's item 2), over real servers on loopback, on SQLite and
PostgreSQL: a signed event posted three times is applied once (side effects counted, a real
worker subprocess, the ingress restarted in between), signed timestamps outside the replay
window are refused, nothing unsigned is open once signatures are configured, nested JSON and
unreadable inputs answer 422, bad keys are refused at start, slow clients are cut off."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from persistence.ingress import create_api
from persistence.runtime import InvalidKeyError, Runtime
from persistence.signatures import Signature, SignatureError
from persistence.stores import Store, open_store
from persistence.ui.app import create_app
from persistence.worker import Worker
from statecharts.errors import ContextError, EventError
from tests.persistence.conftest import Serve, stop_workers, wait_for
from tests.persistence.workflows import (
    LEDGER_ENV,
    approval,
    fulfilment,
    init_ledger,
    payments,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=("sqlite", "postgres"))
def store_kind(request: pytest.FixtureRequest) -> str:
    """The ingress runs on the two durable stores."""
    return str(request.param)


def _stripe_event(event_id: str, amount: int = 5) -> bytes:
    return orjson.dumps(
        {"id": event_id, "type": "payment_intent.succeeded", "data": {"object": {"amount": amount}}}
    )


def _ledger_calls(ledger: str, name: str) -> int:
    with sqlite3.connect(ledger) as db:
        return int(db.execute("SELECT count(*) FROM calls WHERE name = ?", (name,)).fetchone()[0])


# -- R5: replays and duplicate deliveries -------------------------------------------------------


def test_r5_a_signed_event_posted_three_times_is_applied_once_across_an_ingress_restart(
    crash_url: str, tmp_path: Path, serve: Serve
) -> None:
    ledger = str(tmp_path / "ledger.db")
    init_ledger(ledger)
    stripe = Signature.stripe("whsec_stripe-test")
    store = open_store(crash_url, migrate=True)
    runtime = Runtime(store, [payments])
    run_id = runtime.start("payments", key="acct-1")
    base = serve(create_api(runtime, signatures={"payments": stripe}))
    url = f"{base}/api/workflows/payments/runs/acct-1/events"
    body = _stripe_event("evt_1")

    def post(to: str) -> httpx.Response:
        stamp = int(time.time())
        return httpx.post(to, content=body, headers=stripe.headers(body, stamp))

    answers = [post(url) for _ in range(3)]
    assert [a.status_code for a in answers] == [202, 200, 200]
    assert [a.json()["duplicate"] for a in answers] == [False, True, True]
    assert len({a.json()["inbox_id"] for a in answers}) == 1

    env = {**os.environ, LEDGER_ENV: ledger, "PYTHONPATH": str(ROOT)}
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "persistence.cli",
            "worker",
            "--store",
            crash_url,
            "--machines",
            "tests.persistence.workflows",
            "--poll-ms",
            "20",
            "--log-level",
            "WARNING",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: _ledger_calls(ledger, "payment") >= 1, 60)
        # a new process: a fresh store and ingress on the same database, the same delivery
        restarted = Runtime(open_store(crash_url), [payments])
        again = post(
            f"{serve(create_api(restarted, signatures={'payments': stripe}))}"
            "/api/workflows/payments/runs/acct-1/events"
        )
        assert again.status_code == 200 and again.json()["duplicate"] is True
        assert post(url).status_code == 200  # and once more to the first server
        second = _stripe_event("evt_2")
        fresh = httpx.post(url, content=second, headers=stripe.headers(second, int(time.time())))
        assert fresh.status_code == 202
        wait_for(lambda: _ledger_calls(ledger, "payment") >= 2, 60)
        wait_for(lambda: not store.pending_events(run_id), 60)
    finally:
        stop_workers([worker])
    assert _ledger_calls(ledger, "payment") == 2  # evt_1 once (of five posts), evt_2 once
    assert store.get_run(run_id).snapshot["context"]["paid"] == 2
    restarted.store.close()
    store.close()


def test_r5_signed_timestamps_outside_the_replay_window_are_refused(
    store: Store, serve: Serve
) -> None:
    runtime = Runtime(store, [payments, approval])
    runtime.start("payments", key="acct-2")
    signatures = {
        "payments": Signature.stripe("whsec_s"),
        "approval": Signature.slack("slack-signing-secret"),
    }
    base = serve(create_api(runtime, signatures=signatures))
    url = f"{base}/api/workflows/payments/runs/acct-2/events"
    stripe = signatures["payments"]
    body = _stripe_event("evt_old")
    now = int(time.time())
    stale = httpx.post(url, content=body, headers=stripe.headers(body, now - 400))
    assert stale.status_code == 401
    assert "s old, outside the 300 s replay window" in stale.json()["detail"]
    ahead = httpx.post(url, content=body, headers=stripe.headers(body, now + 400))
    assert ahead.status_code == 401 and "in the future" in ahead.text
    # the signature of one time does not sign another
    moved = stripe.headers(body, now - 400)["Stripe-Signature"].replace(
        f"t={now - 400}", f"t={now}"
    )
    assert httpx.post(url, content=body, headers={"Stripe-Signature": moved}).status_code == 401
    assert httpx.post(url, content=body, headers=stripe.headers(body, now)).status_code == 202

    slack = signatures["approval"]
    start = orjson.dumps({"key": "deal-s"})
    old = httpx.post(
        f"{base}/api/workflows/approval/runs",
        content=start,
        headers=slack.headers(start, now - 301),
    )
    assert old.status_code == 401 and "X-Slack-Request-Timestamp" in old.text
    fresh = httpx.post(
        f"{base}/api/workflows/approval/runs", content=start, headers=slack.headers(start, now)
    )
    assert fresh.status_code == 201
    assert [r.key for r in runtime.list(name="approval")] == ["deal-s"]


def test_r5_standard_webhooks_and_github_deliveries_are_deduplicated_by_their_ids(
    store: Store, serve: Serve
) -> None:
    runtime = Runtime(store, [payments, approval])
    first = runtime.start("payments", key="acct-3")
    second = runtime.start("payments", key="acct-4")
    standard = Signature.standard("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    github = Signature.github("gh-secret")
    base = serve(create_api(runtime, signatures={"payments": standard, "approval": github}))
    body = orjson.dumps({"type": "payment_intent.succeeded"})
    now = int(time.time())
    to_first = f"{base}/api/runs/{first}/events"
    codes = [
        httpx.post(to_first, content=body, headers=standard.headers(body, now, "msg_1")).status_code
        for _ in range(3)
    ]
    assert codes == [202, 200, 200]
    # the id is signed: another id on the same signature is refused
    forged = {**standard.headers(body, now, "msg_1"), "webhook-id": "msg_2"}
    assert httpx.post(to_first, content=body, headers=forged).status_code == 401
    # delivery ids are per run: the same id for another run is another delivery
    to_second = f"{base}/api/runs/{second}/events"
    assert (
        httpx.post(
            to_second, content=body, headers=standard.headers(body, now, "msg_1")
        ).status_code
        == 202
    )
    Worker(runtime).run_until_idle()
    assert runtime.get(first).snapshot["context"]["paid"] == 1
    assert runtime.get(second).snapshot["context"]["paid"] == 1

    runtime.start("approval", key="pr-1")
    event = orjson.dumps({"type": "APPROVE", "by": "octocat"})
    hook = {github.header: github.sign(event), "X-GitHub-Delivery": "72d3162e-cc78"}
    url = f"{base}/api/workflows/approval/runs/pr-1/events"
    assert [httpx.post(url, content=event, headers=hook).status_code for _ in range(3)] == [
        202,
        200,
        200,
    ]
    Worker(runtime).run_until_idle()
    assert runtime.get_by_key("approval", "pr-1").status == "done"
    assert runtime.dead_letters(runtime.get_by_key("approval", "pr-1").id) == []
    # a delivery already taken is answered as such after the run has ended, not 409
    assert httpx.post(url, content=event, headers=hook).status_code == 200


def test_r5_an_idempotency_key_deduplicates_unsigned_events_even_twenty_posted_at_once(
    store: Store, serve: Serve
) -> None:
    runtime = Runtime(store, [payments])
    run_id = runtime.start("payments", key="acct-20")
    base = serve(create_api(runtime))
    long_id = httpx.post(
        f"{base}/api/runs/{run_id}/events",
        headers={"Idempotency-Key": "x" * 201},
        json={"type": "payment_intent.succeeded"},
    )
    assert long_id.status_code == 422
    assert long_id.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]
    barrier = threading.Barrier(20)

    def post(_: int) -> int:
        barrier.wait(10)
        return httpx.post(
            f"{base}/api/runs/{run_id}/events",
            timeout=30,
            json={"type": "payment_intent.succeeded"},
            headers={"Idempotency-Key": "evt_20"},
        ).status_code

    with ThreadPoolExecutor(20) as pool:
        codes = sorted(pool.map(post, range(20)))
    assert codes == [200] * 19 + [202]
    assert len(store.pending_events(run_id)) == 1
    Worker(runtime).run_until_idle()
    assert runtime.get(run_id).snapshot["context"]["paid"] == 1


def test_r5_a_signed_start_without_a_key_posted_again_answers_the_first_run(
    store: Store, serve: Serve
) -> None:
    runtime = Runtime(store, [payments, approval, fulfilment])
    stripe, slack = Signature.stripe("whsec_st"), Signature.slack("slack-secret")
    standard = Signature.standard("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    base = serve(
        create_api(
            runtime, signatures={"payments": stripe, "approval": slack, "fulfilment": standard}
        )
    )
    now = int(time.time())

    def post(name: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
        answer = httpx.post(f"{base}/api/workflows/{name}/runs", content=body, headers=headers)
        return answer.status_code, answer.json()["id"]

    # Slack signs no delivery id: the same signed request (body and time) is one start
    body = orjson.dumps({"input": {"amount": 5}})
    slack_posts = [post("approval", body, slack.headers(body, now)) for _ in range(3)]
    assert [code for code, _ in slack_posts] == [201, 200, 200]
    assert len({run for _, run in slack_posts}) == 1
    # a new request (signed at another time) is another start
    assert post("approval", body, slack.headers(body, now - 1))[0] == 201
    # Stripe: the event's id (signed, in the body); a retry re-signed later is the same start
    event = orjson.dumps({"id": "evt_start_1", "input": {"amount": 7}})
    stripe_posts = [post("payments", event, stripe.headers(event, now - lag)) for lag in (0, 0, 30)]
    assert [code for code, _ in stripe_posts] == [201, 200, 200]
    assert len({run for _, run in stripe_posts}) == 1
    # Standard Webhooks: the signed webhook-id, also after the first run has ended
    order = orjson.dumps({"input": {"order_id": "o-1"}})
    first = post("fulfilment", order, standard.headers(order, now, "msg_start"))
    runtime.cancel(first[1])
    assert post("fulfilment", order, standard.headers(order, now, "msg_start")) == (200, first[1])
    assert post("fulfilment", order, standard.headers(order, now, "msg_other"))[0] == 201
    assert {
        name: len(runtime.list(name=name)) for name in ("approval", "payments", "fulfilment")
    } == {"approval": 2, "payments": 1, "fulfilment": 2}
    # the key a start names is kept; the replay's key is shown on the run it started
    assert (
        post(
            "approval",
            orjson.dumps({"key": "deal-k"}),
            slack.headers(orjson.dumps({"key": "deal-k"}), now),
        )[0]
        == 201
    )
    assert runtime.get(stripe_posts[0][1]).key == "delivery:evt_start_1"


def test_r5_standard_webhooks_signatures_match_the_specifications_test_vector() -> None:
    standard = Signature.standard("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    body, stamp, msg = b'{"test": 2432232314}', 1614265330, "msg_p5jXN8AQM9LWM0D4loKWxJek"
    expected = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="  # the spec's example
    assert standard.sign(body, stamp, msg) == expected
    headers = {
        "Webhook-Id": msg,
        "Webhook-Timestamp": str(stamp),
        "Webhook-Signature": f"v1,bm9wZQ== {expected}",
    }  # a rolled secret's first
    assert standard.verify(body, headers, stamp * 1000 + 299_000) == msg
    with pytest.raises(SignatureError, match="301 s old"):
        standard.verify(body, headers, (stamp + 301) * 1000)


def test_r5_the_api_command_takes_the_providers_signatures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from persistence.cli import _signature

    monkeypatch.setenv("STRIPE_SECRET", "whsec_x")
    monkeypatch.setenv("EMPTY_SECRET", " ")
    stripe = _signature("invoice=stripe:STRIPE_SECRET")
    assert (stripe.scheme, stripe.header, stripe.tolerance_s) == ("stripe", "Stripe-Signature", 300)
    plain = _signature("followup=STRIPE_SECRET@X-CRM-Signature")
    assert (plain.scheme, plain.header) == ("hmac", "X-CRM-Signature")
    for bad, says in (
        ("invoice=paypal:STRIPE_SECRET", "PROVIDER one of"),
        ("invoice=stripe:STRIPE_SECRET@X-H", "PROVIDER one of"),
        ("invoice=NO_SUCH_VARIABLE", "is not set"),
        ("invoice=EMPTY_SECRET", "the secret is empty"),
    ):
        with pytest.raises(SystemExit, match=says):
            _signature(bad)


# -- R6: secure mode ----------------------------------------------------------------------------


def test_r6_once_signatures_are_configured_nothing_unsigned_is_open(
    store: Store, serve: Serve
) -> None:
    from machines.orders import order, payment

    runtime = Runtime(store, [approval, order])
    run_id = runtime.start("approval", key="deal-r6")
    order_id = runtime.start("order", {"order_id": 1, "card": "review", "amount": 3}, key="o-6")
    Worker(runtime).run_until_idle()
    (child,) = runtime.children(order_id)
    signature = Signature("whsec-crm", header="X-Hub-Signature-256")
    base = serve(create_api(runtime, signatures={"approval": signature}))

    def refused(response: httpx.Response) -> bool:
        return response.status_code == 401 and "secure mode" in response.text

    assert refused(httpx.get(f"{base}/api/runs/{run_id}"))
    assert refused(httpx.get(f"{base}/api/workflows/approval/runs/deal-r6"))
    assert refused(httpx.post(f"{base}/api/workflows/order/runs", json={"key": "o-7"}))
    assert refused(httpx.post(f"{base}/api/workflows/{payment.id}/runs", json={"key": "p"}))
    assert refused(httpx.post(f"{base}/api/runs/{child.id}/events", json={"type": "APPROVE"}))
    unknown = httpx.post(f"{base}/api/workflows/no_such/runs", json={})
    assert refused(unknown) and "order" not in unknown.text  # no list of workflow names
    assert runtime.list(name="order") == [runtime.get(order_id)]
    assert len(runtime.list(name=payment.id)) == 1
    # the signed workflow's own webhooks still work without a token
    body = orjson.dumps({"type": "APPROVE", "by": "crm"})
    signed = httpx.post(
        f"{base}/api/workflows/approval/runs/deal-r6/events",
        content=body,
        headers={signature.header: signature.sign(body)},
    )
    assert signed.status_code == 202

    # with the token everything is open again; with allow_unsigned, as before
    tokened = serve(create_api(runtime, token="t0ken", signatures={"approval": signature}))
    good = {"Authorization": "Bearer t0ken"}
    assert httpx.get(f"{tokened}/api/runs/{run_id}", headers=good).status_code == 200
    assert httpx.get(f"{tokened}/api/runs/{run_id}").status_code == 401
    runtime.start("approval", key="deal-r6b")
    assert (
        httpx.post(
            f"{tokened}/api/workflows/approval/runs/deal-r6b/events",
            content=body,
            headers={signature.header: signature.sign(body)},
        ).status_code
        == 202
    )
    opened = serve(create_api(runtime, signatures={"approval": signature}, allow_unsigned=True))
    assert httpx.get(f"{opened}/api/runs/{run_id}").status_code == 200


# -- R10: nesting ------------------------------------------------------------------------------


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def _nested_text(depth: int) -> bytes:
    """`_nested(depth)` as JSON text (no encoder goes that deep)."""
    return b'{"a": ' * depth + b"1" + b"}" * depth


@pytest.mark.parametrize("depth", [254, 600, 1_022])
def test_r10_deeply_nested_json_answers_422_naming_the_depth_with_one_log_line_at_most(
    store: Store, serve: Serve, depth: int, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = Runtime(store, [approval])
    run_id = runtime.start("approval", key="deep")
    base = serve(create_api(runtime))
    caplog.clear()
    with caplog.at_level(logging.INFO):
        started = httpx.post(
            f"{base}/api/workflows/approval/runs",
            content=b'{"key": "d2", "input": ' + _nested_text(depth) + b"}",
        )
        sent = httpx.post(
            f"{base}/api/runs/{run_id}/events",
            content=b'{"type": "APPROVE", "by": ' + _nested_text(depth) + b"}",
        )
    for answer in (started, sent):
        assert answer.status_code == 422, answer.text[:300]
        assert "nest deeper than 250 levels" in answer.json()["detail"][0]["msg"]
    served = [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]
    assert len(served) <= 2, [r.getMessage()[:80] for r in served]  # a line a request at most
    assert runtime.list(key="d2") == [] and store.pending_events(run_id) == []
    with pytest.raises(ContextError, match="deeper than 250"):
        runtime.start("approval", _nested(depth))
    with pytest.raises(EventError, match="deeper than 250"):
        runtime.send(run_id, {"type": "APPROVE", "by": _nested(depth)})


# -- R11: keys ---------------------------------------------------------------------------------


def test_r11_keys_no_url_can_reach_are_refused_at_start_naming_the_key(
    store: Store, serve: Serve
) -> None:
    from machines.orders import order

    runtime = Runtime(store, [approval, order])
    for key, why in (
        ("a/b", "must not contain '/'"),
        ("", "must not be empty"),
        ("é" * 300, "600 bytes, over the 512"),
    ):
        with pytest.raises(InvalidKeyError, match=why) as refused:
            runtime.start("approval", key=key)
        assert repr(key)[:20] in str(refused.value)
    base = serve(create_api(runtime))
    answer = httpx.post(f"{base}/api/workflows/approval/runs", json={"key": "deal/1"})
    assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == ["body", "key"]
    assert "'deal/1'" in answer.text
    assert runtime.list() == []
    # the keys the runtime derives for child runs still use '/'
    order_id = runtime.start("order", {"order_id": 1, "card": "review", "amount": 3}, key="o-1")
    Worker(runtime).run_until_idle()
    assert [c.key for c in runtime.children(order_id)] == ["o-1/payment"]


# -- R12: empty secrets ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: Signature(""),
        lambda: Signature("  "),
        lambda: Signature.stripe(""),
        lambda: Signature.standard(""),
        lambda: Signature.standard("whsec_not base64!"),
    ],
)
def test_r12_a_signature_with_an_empty_or_unusable_secret_is_refused(
    make: Callable[[], Signature],
) -> None:
    with pytest.raises(ValueError, match="secret"):
        make()
    assert "hidden" in repr(Signature("s3cret")) and "s3cret" not in repr(Signature("s3cret"))


# -- R14: slow clients -------------------------------------------------------------------------


def _dribble(sends: list[tuple[socket.socket, bytes]], stop: threading.Event) -> None:
    """Send each socket's bytes one at a time, a byte per socket 5 times a second, until all
    are sent, stopped, or cut off."""
    position = 0
    while not stop.is_set() and any(position < len(data) for _, data in sends):
        for sock, data in sends:
            if position < len(data):
                with contextlib.suppress(OSError):
                    sock.sendall(data[position : position + 1])
        position += 1
        time.sleep(0.2)


def test_r14_slow_clients_of_the_ingress_and_the_ui_are_cut_off_by_header_and_body_timeouts(
    store: Store, serve: Serve
) -> None:
    runtime = Runtime(store, [approval])
    base = serve(create_api(runtime), header_timeout_s=2.0, body_timeout_s=2.0)
    port = int(base.rsplit(":", 1)[1])
    headers_only = b"POST /api/workflows/approval/runs HTTP/1.1\r\nhost: x\r\n" + b"x" * 200
    body_slow = (
        b"POST /api/workflows/approval/runs HTTP/1.1\r\nhost: x\r\n"
        b"content-type: application/json\r\ncontent-length: 200\r\n\r\n"
    )
    sends = []
    for i in range(40):
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        if i % 2:  # headers in at once, then the body a byte at a time
            sock.sendall(body_slow)
            sends.append((sock, b"{" + b" " * 199))
        else:
            sends.append((sock, headers_only))
    silent = socket.create_connection(("127.0.0.1", port), timeout=30)  # sends nothing at all
    # the UI is served the same way: its slow clients too
    ui_port = int(
        serve(create_app(store, [approval]), header_timeout_s=2.0, body_timeout_s=2.0).rsplit(
            ":", 1
        )[1]
    )
    ui_form = (
        b"POST /login HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-www-form-"
        b"urlencoded\r\ncontent-length: 100\r\n\r\n"
    )
    for i in range(6):
        sock = socket.create_connection(("127.0.0.1", ui_port), timeout=30)
        if i % 2:
            sock.sendall(ui_form)
            sends.append((sock, b"token=" + b"x" * 94))
        else:
            sends.append((sock, b"GET / HTTP/1.1\r\nhost: x\r\n" + b"x" * 100))
    stop = threading.Event()
    dribbler = threading.Thread(target=_dribble, args=(sends, stop))
    dribbler.start()
    try:
        # while they dribble, others are served
        assert httpx.get(f"{base}/api/runs/nope").status_code == 404
        answers = []
        for sock in [*(s for s, _ in sends), silent]:
            received = b""
            while chunk := sock.recv(4096):  # until the server closes (30 s at most: timeout)
                received += chunk
            answers.append(received)
    finally:
        stop.set()
        dribbler.join(10)
        for sock in [*(s for s, _ in sends), silent]:
            sock.close()
    assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers), {a[:40] for a in answers}
    assert runtime.list() == []


# -- issue 44 item 2: no 500 for what a client sent -------------------------------------------


def test_i44_an_input_the_workflow_cannot_start_from_is_a_422_naming_the_problem(
    store: Store, serve: Serve, tmp_path: Path
) -> None:
    runtime = Runtime(store, [fulfilment])
    base = serve(create_api(runtime))
    answer = httpx.post(
        f"{base}/api/workflows/fulfilment/runs", json={"key": "f-1", "input": {"id": 7}}
    )
    assert answer.status_code == 422
    (problem,) = answer.json()["detail"]
    assert problem["loc"] == ["body", "input"] and "KeyError: 'order_id'" in problem["msg"]
    assert runtime.list() == []
    assert (
        httpx.post(
            f"{base}/api/workflows/fulfilment/runs", json={"key": "f-1", "input": {"order_id": 7}}
        ).status_code
        == 201
    )


def test_i44_runs_start_prints_one_line_for_an_input_the_workflow_cannot_start_from(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    open_store(url, migrate=True).close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for args, expected in (
        (("--input", '{"id": 7}'), "KeyError: 'order_id'"),
        (("--key", "a/b", "--input", '{"order_id": 7}'), "must not contain '/'"),
        (("--input", _nested_text(400).decode()), "deeper than 250"),
    ):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "persistence.cli",
                "runs",
                "start",
                "fulfilment",
                "--store",
                url,
                "--machines",
                "tests.persistence.workflows",
                *args,
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1
        assert "Traceback" not in done.stderr and expected in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
