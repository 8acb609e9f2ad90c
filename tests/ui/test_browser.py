"""End to end in a real headless Chromium against the UI served by uvicorn in a subprocess, with
a real worker process stepping the runs, over a real SQLite file filled with the demo data."""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from persistence.stores import open_store
from statecharts.render.graphviz import ACTIVE_FILL
from tests.ui.demo import Demo, fill
from tests.ui.processes import Served, ui_server, worker
from tests.ui.screenshots import take_screenshots

pytestmark = pytest.mark.usefixtures("dot_installed")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Demo, Path]]:
    workdir = tmp_path_factory.mktemp("ui")
    url = f"sqlite:///{workdir / 'runs.db'}"
    yield url, fill(url), workdir


@pytest.fixture(scope="module")
def served(demo: tuple[str, Demo, Path]) -> Iterator[Served]:
    url, _, workdir = demo
    with worker(url, workdir), ui_server(url, workdir) as server:
        yield server


def state_fill(page: Any, state_id: str) -> str | None:
    """The fill of the diagram box drawn for `state_id` (None if there is no such box)."""
    value = page.evaluate(
        """(id) => {
            for (const g of document.querySelectorAll('svg.diagram g.node')) {
                const title = g.querySelector('title');
                if (title && title.textContent === id) {
                    const shape = g.querySelector('path[fill]:not([fill=none]), '
                        + 'polygon[fill]:not([fill=none]), ellipse[fill]:not([fill=none])');
                    return shape ? shape.getAttribute('fill') : '';
                }
            }
            return null;
        }""",
        state_id,
    )
    return None if value is None else str(value)


def test_open_the_list_filter_open_a_run_and_see_its_state_highlighted(
    served: Served, demo: tuple[str, Demo, Path], page: Any
) -> None:
    _, runs, _ = demo
    page.goto(served.url + "/")
    assert page.locator("h1").inner_text() == "Runs"
    # the stuck and failed runs come first, in the "Needs attention" section
    attention = page.locator("section.attention")
    assert attention.locator(f"tr[data-run='{runs.stuck}']").count() == 1
    assert attention.locator(f"tr[data-run='{runs.failed}']").count() == 1
    assert attention.locator(f"tr[data-run='{runs.retrying}']").count() == 0  # waiting, not stuck

    page.select_option("#f-workflow", "order")
    page.fill("#f-state", "charging_card")
    page.click("form.filters button[type=submit]")
    page.wait_for_url(re.compile(r"state=charging_card"))
    listed = page.locator("table.runs tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.run)"
    )
    assert sorted(set(listed)) == sorted([runs.retrying, runs.failed])

    page.click(f"tr[data-run='{runs.retrying}'] td a >> nth=0")
    page.wait_for_url(f"**/runs/{runs.retrying}")
    assert page.locator("#run-state").inner_text() == "charging_card.waiting_to_retry"
    assert state_fill(page, "order.charging_card.waiting_to_retry") == ACTIVE_FILL
    assert state_fill(page, "order.awaiting_approval") not in (None, ACTIVE_FILL)
    # pending timer with its due time, attempts and the last error
    timers = page.locator("table.timers").inner_text()
    assert "order.charging_card" in timers and re.search(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", timers
    )
    assert (
        "TimeoutError: payment provider did not answer" in page.locator("#last-error").inner_text()
    )
    timeline = page.locator("table.timeline").inner_text()
    assert "PAY" in timeline and "charging_card.attempting" in timeline


def test_send_an_event_and_watch_the_state_change(
    served: Served, demo: tuple[str, Demo, Path], page: Any
) -> None:
    url, runs, _ = demo
    run_id = runs.waiting[0]
    page.goto(f"{served.url}/runs/{run_id}")
    assert state_fill(page, "order.awaiting_approval") == ACTIVE_FILL
    assert "APPROVE" in page.locator(".actions .hint").inner_text()  # what it accepts now
    page.fill("#event-type", "APPROVE")
    page.click("#send")
    page.wait_for_url(re.compile(r"done=sent|/runs/[^?]+$"))
    # the worker applies the event; the page reloads itself when the run moves
    page.locator("#run-state", has_text="shipped").wait_for(timeout=20_000)
    assert state_fill(page, "order.shipped") == ACTIVE_FILL
    assert state_fill(page, "order.awaiting_approval") != ACTIVE_FILL
    first = page.locator("table.timeline tbody tr").first.inner_text()
    assert "APPROVE" in first and "awaiting_approval" in first and "shipped" in first
    store = open_store(url)
    try:
        journal = store.list_events(run_id)
        assert journal[-1].event == {"type": "APPROVE"}
        assert (journal[-1].state_before, journal[-1].state_after) == (
            "awaiting_approval",
            "shipped",
        )
        assert store.get_run(run_id).status == "done"
    finally:
        store.close()


def test_retry_a_waiting_call_now(served: Served, demo: tuple[str, Demo, Path], page: Any) -> None:
    url, runs, _ = demo
    page.goto(f"{served.url}/runs/{runs.retrying}")
    assert "1 try failed" in page.locator(".attempt").inner_text()
    page.click("button.retry")
    # the call runs again at once (and times out again): 2 tries failed, waiting again. The
    # worker commits the retry (state `attempting`, the call pending) before the call's
    # failure, and the page may show that step first: wait until it reloads to the wait.
    page.locator(".attempt", has_text="2 tries failed").wait_for(timeout=60_000)
    page.locator("#run-state", has_text="waiting_to_retry").wait_for(timeout=60_000)
    assert page.locator("#run-state").inner_text() == "charging_card.waiting_to_retry"
    assert "2 tries failed" in page.locator(".attempt").inner_text()
    store = open_store(url)
    try:
        types = [e.event["type"] for e in store.list_events(runs.retrying)]
        assert any(t.startswith("xstate.after.retry:order.charging_card") for t in types)
    finally:
        store.close()


def test_the_timeline_names_engine_events_and_keeps_the_raw_name_on_hover(
    served: Served, demo: tuple[str, Demo, Path], page: Any
) -> None:
    _, runs, _ = demo
    page.goto(f"{served.url}/runs/{runs.retrying}")
    if page.locator("b.event.engine", has_text="retry wait over").count() == 0:
        page.click("button.retry")  # this test may run alone: wait out one retry now
        page.locator("b.event.engine", has_text="retry wait over").first.wait_for(timeout=20_000)
    timeline = page.locator("table.timeline")
    text = timeline.inner_text()
    assert "retry wait over: Charging card" in text
    assert "charge card failed" in text  # the call's failure, in the diagram's words
    assert "xstate." not in text  # no engine name is shown as such
    assert "PAY" in text  # an event sent from outside keeps its name
    wait_over = timeline.locator("b.event.engine", has_text="retry wait over").first
    assert wait_over.get_attribute("title") == (
        "xstate.after.retry:order.charging_card.order.charging_card.waiting_to_retry"
    )
    failed = timeline.locator("b.event.engine", has_text="charge card failed").first
    assert failed.get_attribute("title") == "xstate.error.actor.order.charging_card:invocation[0]"
    wait_over.hover()  # the raw name is the native tooltip
    assert page.evaluate("() => document.querySelector('b.event.engine:hover').title").startswith(
        "xstate.after.retry:"
    )


def _zoom(page: Any) -> dict[str, float]:
    return dict(
        page.evaluate(
            """() => {
            const box = document.querySelector('[data-zoom]');
            const view = box.querySelector('.zoom-view');
            const svg = view.querySelector('svg');
            return {scale: parseFloat(box.dataset.scale), width: svg.getBoundingClientRect().width,
                    height: svg.getBoundingClientRect().height, left: view.scrollLeft,
                    top: view.scrollTop, viewWidth: view.clientWidth,
                    viewHeight: view.clientHeight};
        }"""
        )
    )


def _title_height(page: Any, state_id: str) -> float:
    """The on-screen height (px) of the first line of a state's title."""
    return float(
        page.evaluate(
            """(id) => {
            for (const g of document.querySelectorAll('svg.diagram g.node')) {
                if (g.querySelector('title').textContent === id) {
                    return g.querySelector('text').getBoundingClientRect().height;
                }
            }
            return 0;
        }""",
            state_id,
        )
    )


def test_the_run_diagram_is_readable_at_1400_px_and_zooms_and_pans(
    served: Served, demo: tuple[str, Demo, Path], page: Any
) -> None:
    _, runs, _ = demo
    url = f"{served.url}/runs/{runs.waiting[3]}"
    page.goto(url)
    start = _zoom(page)
    assert start["viewWidth"] > 1300  # the diagram has the page's width, not a side panel
    assert start["scale"] >= 0.75
    assert _title_height(page, "order.awaiting_approval") >= 11  # readable as it opens

    page.click(".zoom-in")
    bigger = _zoom(page)
    assert bigger["scale"] == pytest.approx(start["scale"] * 1.25, rel=0.01)
    assert bigger["width"] == pytest.approx(start["width"] * 1.25, rel=0.02)
    assert page.locator(".zoom-level").inner_text() == f"{round(bigger['scale'] * 100)}%"

    page.evaluate("() => { document.querySelector('.zoom-view').scrollTop = 0; }")
    bigger = _zoom(page)
    view = page.locator(".zoom-view").bounding_box()
    x, y = view["x"] + view["width"] / 2, view["y"] + view["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x - 150, y - 200, steps=8)
    page.mouse.up()
    moved = _zoom(page)
    assert moved["top"] == pytest.approx(bigger["top"] + 200, abs=3)  # moved with the pointer
    assert page.url == url  # a drag over a state's link does not follow it

    page.keyboard.down("Control")
    page.mouse.wheel(0, -120)
    page.keyboard.up("Control")
    page.wait_for_function(
        "(s) => parseFloat(document.querySelector('[data-zoom]').dataset.scale) > s",
        arg=moved["scale"],
    )

    page.click(".zoom-fit")
    fitted = _zoom(page)
    assert fitted["width"] <= fitted["viewWidth"] + 1 and fitted["height"] <= (
        fitted["viewHeight"] + 1
    )
    page.click(".zoom-real")
    assert _zoom(page)["scale"] == 1

    page.reload()  # the run page reloads itself when the run moves: the zoom is kept
    assert _zoom(page)["scale"] == 1

    page.locator("svg.diagram g[data-state='shipped'] a").click()  # a plain click still links
    page.wait_for_url(re.compile(r"state=shipped"))


def test_cancel_a_run(served: Served, demo: tuple[str, Demo, Path], page: Any) -> None:
    url, runs, _ = demo
    run_id = runs.waiting[1]
    page.goto(f"{served.url}/runs/{run_id}")
    page.fill("form.cancel input[name=reason]", "duplicate order")
    page.click("#cancel")
    page.locator(".facts .status.s-cancelled").wait_for(timeout=20_000)
    assert page.locator("#send").count() == 0  # an ended run offers no actions
    cancelled = page.locator("table.timeline b.event.engine", has_text="cancelled")
    assert cancelled.first.get_attribute("title") == "statecharts.cancel"  # raw name on hover
    store = open_store(url)
    try:
        run = store.get_run(run_id)
        assert (run.status, run.last_error) == ("cancelled", "duplicate order")
    finally:
        store.close()


def test_injected_script_in_context_is_shown_as_text_and_secrets_are_hidden(
    served: Served, demo: tuple[str, Demo, Path], page: Any
) -> None:
    _, runs, _ = demo
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{served.url}/runs/{runs.scripted}")
    context = page.locator("#context").inner_text()
    assert "<script>alert('owned')</script>" in context
    assert "<img src=x onerror=alert(1)>" in context
    assert page.locator("main script, main img").count() == 0  # no element was created
    assert page.locator("script").count() == 1  # only the page's own ui.js
    assert "s3cr3t-value" not in page.content() and '"[hidden]"' in context
    page.goto(served.url + "/api/runs/" + runs.scripted)
    assert "s3cr3t-value" not in page.content()
    assert dialogs == []


def test_screenshots_of_the_three_pages(
    served: Served, demo: tuple[str, Demo, Path], page: Any
) -> None:
    _, runs, workdir = demo
    shots = take_screenshots(page, served.url, runs.retrying, "order", workdir / "shots")
    for path in shots:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


# -- the token --------------------------------------------------------------------------------


def status_of(url: str, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_a_token_protected_instance_refuses_requests_without_the_token(
    demo: tuple[str, Demo, Path], page: Any
) -> None:
    url, runs, workdir = demo
    token = "t0ken-" + "x" * 30
    with ui_server(url, workdir, token=token) as server:
        for path in ("/", f"/runs/{runs.stuck}", "/api/runs", "/openapi.json", "/workflows"):
            assert status_of(server.url + path) == 401, path
            assert status_of(server.url + path, {"X-Statecharts-Token": "wrong"}) == 401, path
        assert status_of(server.url + "/api/runs", {"Authorization": f"Bearer {token}"}) == 200
        assert status_of(server.url + "/", {"X-Statecharts-Token": token}) == 200

        response = page.goto(server.url + f"/runs/{runs.stuck}")
        assert response.status == 401 and page.locator("#token").count() == 1
        assert runs.stuck not in page.locator("main").inner_text()
        page.fill("#token", "not-it")
        page.click("form button[type=submit]")
        assert "not right" in page.locator(".flash.bad").inner_text()
        page.fill("#token", token)
        page.click("form button[type=submit]")
        page.wait_for_url(f"**/runs/{runs.stuck}")
        assert page.locator("#run-state").inner_text() == "awaiting_approval"
        cookies = page.context.cookies()
        assert cookies and all(token not in c["value"] for c in cookies)
    assert token not in server.output()  # never logged


def test_read_only_hides_actions_and_refuses_them(demo: tuple[str, Demo, Path], page: Any) -> None:
    url, runs, workdir = demo
    with ui_server(url, workdir, "--read-only") as server:
        page.goto(f"{server.url}/runs/{runs.waiting[2]}")
        assert page.locator("#run-state").inner_text() == "awaiting_approval"
        assert page.locator("form[action$='/send'], form[action$='/cancel']").count() == 0
        assert page.locator(".mode").inner_text().strip() == "read-only"
        # a hand-made POST (with a valid CSRF pair) is refused too
        page.goto(f"{server.url}/runs/{runs.waiting[2]}")
        status = page.evaluate(
            """async (runId) => {
                const r = await fetch('/runs/' + runId + '/cancel', {method: 'POST',
                    headers: {'Content-Type': 'application/x-www-form-urlencoded'},
                    body: 'csrf_token=whatever'});
                return r.status; }""",
            runs.waiting[2],
        )
        assert status == 403


def test_the_same_pages_on_a_postgresql_store(
    pg_dsn: str, pg_schema: str, tmp_path: Path, page: Any
) -> None:
    url = f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}schema={pg_schema}"
    runs = fill(url)
    with worker(url, tmp_path), ui_server(url, tmp_path) as server:
        page.goto(server.url + "/?workflow=order&status=error")
        assert page.locator("table.runs tbody tr").evaluate_all(
            "rows => rows.map(r => r.dataset.run)"
        ) == [runs.failed]
        page.goto(f"{server.url}/runs/{runs.waiting[0]}")
        assert state_fill(page, "order.awaiting_approval") == ACTIVE_FILL
        page.fill("#event-type", "REJECT")
        page.click("#send")
        page.locator("#run-state", has_text="rejected").wait_for(timeout=20_000)
        assert state_fill(page, "order.rejected") == ACTIVE_FILL
        page.goto(server.url + "/workflows/order")
        badge = page.locator("svg.diagram g[data-state='awaiting_approval']")
        store = open_store(url)
        try:
            active = store.list_runs(status="active", workflow_name="order", limit=1000)
        finally:
            store.close()
        waiting = sum(1 for r in active if r.state == "awaiting_approval")
        assert waiting > 0 and badge.get_attribute("data-runs") == str(waiting)


def test_the_timeline_stays_inside_its_card_at_1440_px(
    served: Served, demo: tuple[str, Demo, Path], page: Any
) -> None:
    """Issue 44: at 1440 px the run page's timeline (long state paths, event payloads) ran out
    of its card. Every timeline cell ends inside the card's box, on every demo run."""
    url, runs, _ = demo
    store = open_store(url)
    try:  # an event as a webhook sends one: a long reference, a long unbroken token
        # (to a run the module's other tests left waiting: they approve and cancel some)
        target = next(r for r in reversed(runs.waiting) if store.get_run(r).status == "active")
        store.send_event(
            target,
            {
                "type": "APPROVE",
                "by": "approvals-service-eu-west-1",
                "reference": "ord_" + "9f3a7c21" * 16,
                "note": "checked " * 30,
            },
            0,
        )
        deadline = time.monotonic() + 20  # the worker process applies it
        while store.pending_events(target) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        store.close()
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{served.url}/runs/{target}")
    page.locator("table.timeline", has_text="APPROVE").wait_for(timeout=20_000)
    for run_id in (target, runs.retrying, runs.failed, runs.scripted):
        page.goto(f"{served.url}/runs/{run_id}")
        overflow = page.evaluate(
            """() => {
                const table = document.querySelector('table.timeline');
                if (!table) return null;
                const card = table.closest('section').getBoundingClientRect();
                let worst = 0;
                for (const cell of table.querySelectorAll('td, th')) {
                    worst = Math.max(worst, cell.getBoundingClientRect().right - card.right);
                }
                return {worst, page: document.documentElement.scrollWidth - window.innerWidth};
            }"""
        )
        assert overflow is not None, run_id
        assert overflow["worst"] <= 0, (run_id, overflow)
        assert overflow["page"] <= 0, (run_id, overflow)
