"""Issue 44, the on-call view: a run that went on after an error (finished, or healthy again)
does not show that error in red, in the UI or in `runs list`; a failed run's page links to the
error-workflow run its failure started, and the traceback of the code that failed it (a
named action from the outbox, an assign inside the step, a call's error no state handled), as
`runs show` does. On SQLite and PostgreSQL."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import pytest

from persistence.cli import main as cli_main
from persistence.runtime import Runtime
from persistence.stores import Store
from persistence.worker import Worker
from statecharts import SimulatedClock, assign, create_machine

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
        {
            "id": "order",
            "initial": "paying",
            "meta": {"error_workflow": "order_failed"},
            "context": {"order": None},
            "states": {
                "paying": {"on": {"PAY": "charging", "DECLINE": "declining"}},
                "charging": {
                    "invoke": {
                        "src": "flaky",
                        "input": "o-1",
                        "onDone": "shipping",
                        "retry": {"max_attempts": 3, "initial_interval": 0},
                    }
                },
                "declining": {"invoke": {"src": "declined", "onDone": "shipping"}},
                "shipping": {"on": {"SHIPPED": "done"}},
                "done": {"type": "final"},
            },
        },
        actors={"flaky": flaky, "declined": declined},
    )
    alert = create_machine(
        {"id": "order_failed", "initial": "noted", "states": {"noted": {"type": "final"}}}
    )
    return [order, alert]


def test_an_error_the_run_went_on_after_is_not_shown_as_current(
    store: Store, clock: SimulatedClock, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
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
        row = listing[listing.index(f'data-run="{run_id}"') :]
        row = row[: row.index("</tr>")]
        assert 'class="err"' not in row and 'class="earlier-err dim"' in row, row
    failed_row = listing[listing.index(f'data-run="{failed}"') :]
    assert 'class="err"' in failed_row[: failed_row.index("</tr>")]
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


def send_receipt_mail(context: Any, event: Any) -> None:
    """A named action (run from the outbox, after its step) whose mail server is down."""
    raise RuntimeError("mail server down")


def total_of(context: Any, event: Any) -> dict[str, Any]:
    """An assign (run inside the step) that cannot read the event it is given."""
    return {"total": event["amount"] * 2}


def failing_machine() -> Any:
    return create_machine(
        {
            "id": "receipt",
            "initial": "open",
            "context": {"total": 0},
            "states": {
                "open": {"on": {"MAIL": {"actions": "send_mail"}, "PRICE": {"actions": "price"}}}
            },
        },
        actions={"send_mail": send_receipt_mail, "price": assign(total_of)},
    )


def test_a_failed_runs_page_and_runs_show_give_the_traceback_of_the_action_that_failed_it(
    store: Store, clock: SimulatedClock, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    runtime = Runtime(store, [failing_machine(), *machines()], clock=clock)
    mailed, priced, healthy = (runtime.start("receipt") for _ in range(3))
    runtime.send(mailed, "MAIL")
    runtime.send(priced, {"type": "PRICE", "cents": 5})
    Worker(runtime).run_until_idle()
    assert (
        runtime.get(mailed).last_error == "action 'send_mail' raised RuntimeError: mail server down"
    )
    assert runtime.get(priced).status == "error" and "KeyError" in runtime.get(priced).last_error

    client = TestClient(create_app(store, [failing_machine()]))
    where = {
        mailed: ('raise RuntimeError("mail server down")', "send_receipt_mail"),
        priced: ('return {"total": event["amount"] * 2}', "total_of"),
    }
    for run_id, (line, function) in where.items():
        page = client.get(f"/runs/{run_id}").text
        box = page[page.index('id="error-traceback"') :]
        box = html.unescape(box[: box.index("</details>")])
        assert "Traceback (most recent call last)" in box and __file__ in box, box
        assert f"in {function}" in box and line in box, box
        assert client.get(f"/api/runs/{run_id}").json()["error_traceback"] == html.unescape(
            box[box.index("<pre>") + 5 : box.index("</pre>")]
        )
        assert cli_main(["runs", "show", run_id, "--store", store_url]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert shown["last_error"] == runtime.get(run_id).last_error
        assert line in shown["error_traceback"] and shown["error_traceback"].rstrip().endswith(
            "mail server down" if run_id == mailed else "KeyError: 'amount'"
        )

    # a run failed by a call's error no state handled: that call's last attempt's traceback
    declined = runtime.start("order")
    runtime.send(declined, "DECLINE")
    Worker(runtime).run_until_idle()
    order_client = TestClient(create_app(store, machines()))
    page = order_client.get(f"/runs/{declined}").text
    box = html.unescape(page[page.index('id="error-traceback"') :])
    box = box[: box.index("</details>")]
    assert "traceback of call 'order.declining:invocation[0]', attempt 1" in box, box
    assert 'raise ValueError("card declined by issuer")' in box and "in declined" in box
    assert "ValueError: ValueError" not in html.unescape(page)  # the calls table says it once
    assert cli_main(["runs", "show", declined, "--store", store_url]) == 0
    assert "in declined" in json.loads(capsys.readouterr().out)["error_traceback"]

    assert 'id="error-traceback"' not in client.get(f"/runs/{healthy}").text
    assert client.get(f"/api/runs/{healthy}").json()["error_traceback"] is None
    assert cli_main(["runs", "show", healthy, "--store", store_url]) == 0
    assert json.loads(capsys.readouterr().out)["error_traceback"] is None


def test_a_failed_runs_traceback_and_timeline_stay_inside_their_cards_at_1440_px(
    store: Store, clock: SimulatedClock, page: Any
) -> None:
    """The run page of a run failed by an action, in headless Chromium 1440 px wide (the pages
    served by the app in this process, through the browser's request routing): every card's
    content, the traceback and a long event payload in the timeline included, ends inside the
    card, and the page does not scroll sideways."""
    runtime = Runtime(store, [failing_machine()], clock=clock)
    run_id = runtime.start("receipt")
    runtime.send(
        run_id, {"type": "PRICE", "reference": "ord_" + "9f3a7c21" * 40, "note": "checked " * 30}
    )
    Worker(runtime).run_until_idle()
    client = TestClient(create_app(store, [failing_machine()]))
    origin = "http://ui.test"

    def serve(route: Any) -> None:
        answer = client.get(route.request.url.removeprefix(origin))
        route.fulfill(
            status=answer.status_code,
            body=answer.content,
            headers={"content-type": answer.headers.get("content-type", "text/html")},
        )

    page.route(f"{origin}/**", serve)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{origin}/runs/{run_id}")
    assert page.locator("#error-traceback pre").inner_text().startswith("Traceback")
    overflow = page.evaluate(  # how far any text shows past its card's right edge
        """() => {
            let worst = 0;
            for (const card of document.querySelectorAll('section')) {
                const edge = card.getBoundingClientRect().right;
                const texts = document.createTreeWalker(card, NodeFilter.SHOW_TEXT);
                for (let text = texts.nextNode(); text; text = texts.nextNode()) {
                    const range = document.createRange();
                    range.selectNodeContents(text);
                    let right = range.getBoundingClientRect().right;
                    // (a scrolling or clipping box shows its content only up to its own edge)
                    for (let box = text.parentElement; box && box !== card;
                         box = box.parentElement) {
                        if (getComputedStyle(box).overflowX !== 'visible') {
                            right = Math.min(right, box.getBoundingClientRect().right);
                        }
                    }
                    worst = Math.max(worst, right - edge);
                }
            }
            return {worst, page: document.documentElement.scrollWidth - window.innerWidth};
        }"""
    )
    assert overflow["worst"] <= 0 and overflow["page"] <= 0, overflow
