"""The operator's web app (FastAPI): runs list, run page, workflow pages, actions and the JSON
API, over any store.

`create_app(store, machines)` builds it; `persistence.ui.cli` serves it with uvicorn. Actions
(send an event, retry a waiting call now, cancel) go through `persistence.runtime.Runtime`, the
same API code uses, so leases, versions and the journal apply to them exactly as to code.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

import orjson
from fastapi import FastAPI, Form, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import ClientDisconnect
from starlette.templating import Jinja2Templates

from persistence.columns import error_is_current
from persistence.lifecycle import NotRestorableError
from persistence.runtime import Clock, NotResumableError, Runtime
from persistence.stores import RunFinishedError, RunNotFoundError, RunRecord, Store, StoreError
from persistence.ui import api, views
from persistence.ui.diagrams import (
    HEAT_FILLS,
    DiagramUnavailable,
    SvgCache,
    heat_svg,
    run_svg,
    runs_link,
)
from persistence.ui.security import CSRF_FIELD, Guard, csrf_ok, csrf_value
from persistence.web.access import SESSION_COOKIE, document_token, same_token, session_value
from persistence.web.inbound import RESERVED_PREFIXES, client_gone
from persistence.web.responses import RunDetailOut, run_out
from persistence.web.runs import RunDetail, error_text, json_text, run_detail, run_error, timers_of
from statecharts import Machine, Snapshot
from statecharts.render.graphviz import ACTIVE_FILL
from statecharts.render.timeline import engine_event_phrase

log = logging.getLogger("statecharts.ui")
HERE = Path(__file__).parent
DONE_MESSAGES = {
    "sent": "Event queued. A worker applies it at the run's next step; this page reloads when "
    "the run moves.",
    "retried": "Retry requested: the waiting call is tried again at the run's next step.",
    "cancelled": "Run cancelled.",
    "requested": "Cancel requested: the worker holding the run cancels it at its next step.",
    "finished": "The run had already ended; nothing was changed.",
    "resumed": "Run resumed from the state it failed in: a worker picks it up now.",
    "forked": "This run was forked from the step asked for: a worker picks it up now; the "
    "original is untouched.",
    "reset": "Run reset to the step asked for: a worker picks it up now; the journal is kept.",
}


@dataclass
class UI:
    """What the request handlers share."""

    store: Store
    machines: Sequence[Machine]
    read_only: bool
    token: str | None
    clock: Clock
    stuck_after_ms: int
    page_size: int
    runtime: Runtime | None = None
    cache: SvgCache = field(default_factory=SvgCache)
    by_fingerprint: dict[str, Machine] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.machines:
            self.runtime = Runtime(self.store, self.machines, clock=self.clock, check_schema=False)
        self.by_fingerprint = {m.fingerprint: m for m in self.machines}

    @property
    def can_act(self) -> bool:
        """Actions are offered: not read-only and a runtime to send them through."""
        return not self.read_only and self.runtime is not None

    def machine_for(self, run: RunRecord) -> Machine | None:
        """The loaded definition that can read `run` (exact version or via a migration)."""
        if self.runtime is not None:
            return self.runtime.machine_for(run)
        return self.by_fingerprint.get(run.workflow_version)

    def latest(self, workflow: str) -> Machine | None:
        """The newest loaded definition of `workflow`."""
        found = [m for m in self.machines if m.id == workflow]
        return found[-1] if found else None

    def workflow_names(self) -> list[str]:
        """Workflows with runs in the store or a loaded definition."""
        names = {name for name, _, _ in self.store.run_groups("workflow_name")}
        return sorted(names | {m.id for m in self.machines})


def create_app(
    store: Store,
    machines: Sequence[Machine] = (),
    *,
    read_only: bool = False,
    token: str | None = None,
    clock: Clock | None = None,
    stuck_after_ms: int = 3_600_000,
    page_size: int = 50,
) -> FastAPI:
    """The web app over `store`. `machines` are the definitions to draw diagrams with and to
    act through (without them, pages show no diagrams and offer no actions). With `token`,
    every request must carry it (see `persistence.ui.security`)."""
    ui = UI(store, machines, read_only, token, clock or store.clock(), stuck_after_ms, page_size)
    # Autoescape everything: run data (contexts, events, errors) is shown as text, never HTML.
    autoescape = select_autoescape(default=True, default_for_string=True)
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=autoescape)
    templates = Jinja2Templates(env=env)
    _filters(env, ui)
    app = FastAPI(
        title="statecharts runs",
        version="1",
        docs_url=None,
        redoc_url=None,
        description="Durable statechart runs: list, inspect, act.",
    )
    app.state.ui = ui

    def page(
        request: Request, name: str, context: Mapping[str, Any], status: int = 200
    ) -> Response:
        base = {
            "ui": ui,
            "csrf": csrf_value(request),
            "csrf_field": CSRF_FIELD,
            "now": ui.clock.now(),
        }
        return templates.TemplateResponse(request, name, {**base, **context}, status_code=status)

    def unauthorized(request: Request) -> Response:
        if request.url.path.startswith("/api/") or "text/html" not in request.headers.get(
            "accept", ""
        ):
            return Response(
                '{"detail":"missing or wrong access token"}',
                401,
                media_type="application/json",
                headers={"WWW-Authenticate": "Bearer"},
            )
        return page(
            request, "login.html", {"next": request.url.path, "failed": False, "plain": True}, 401
        )

    app.add_middleware(Guard, token=token, unauthorized=unauthorized)
    app.add_exception_handler(ClientDisconnect, client_gone)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    # -- pages ------------------------------------------------------------------------------
    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def runs_page(
        request: Request,
        workflow: str = "",
        status: str = "",
        state: str = "",
        key: str = "",
        age: str = "",
        where: str = "",
        page_number: Annotated[int, Query(alias="page", ge=1, le=views.MAX_PAGE)] = 1,
    ) -> Response:
        filters = views.Filters(workflow, status, state, key, age, where)
        try:
            listing = views.run_list(
                ui.store, filters, page_number, ui.page_size, ui.clock.now(), ui.stuck_after_ms
            )
        except views.FilterError as exc:
            return page(request, "error.html", {"title": "Bad filter", "message": str(exc)}, 422)
        states = _state_choices(ui.latest(workflow)) if workflow else []
        return page(
            request,
            "runs.html",
            {
                "listing": listing,
                "f": filters,
                "workflows": ui.workflow_names(),
                "states": states,
                "ages": views.AGES,
                "statuses": views.STATUSES,
            },
        )

    @app.get("/runs/{run_id}", response_class=HTMLResponse, include_in_schema=False)
    def run_page(request: Request, run_id: str, done: str = "") -> Response:
        return _run_view(request, run_id, message=DONE_MESSAGES.get(done))

    def _run_view(
        request: Request,
        run_id: str,
        message: str | None = None,
        error: str | None = None,
        status: int = 200,
    ) -> Response:
        try:
            detail = run_detail(ui.store, run_id)
        except RunNotFoundError:
            return page(
                request,
                "error.html",
                {"title": "No such run", "message": f"No run has the id {run_id!r}."},
                404,
            )
        diagram, diagram_note, accepts = _run_diagram(ui, detail)
        stuck = views.is_stuck(detail.run, ui.clock.now(), ui.stuck_after_ms)
        machine = ui.machine_for(detail.run)
        return page(
            request,
            "run.html",
            {
                "d": detail,
                "run": detail.run,
                "diagram": diagram,
                "diagram_note": diagram_note,
                "accepts": accepts,
                "event_words": lambda t: engine_event_phrase(t, machine),
                "active_fill": ACTIVE_FILL,
                "message": message,
                "error": error,
                "stuck": stuck,
                "fork": ui.store.fork_of(detail.run.id),
                "latest": ui.latest(detail.run.workflow_name),
            },
            status,
        )

    @app.get("/workflows", response_class=HTMLResponse, include_in_schema=False)
    def workflows_page(request: Request) -> Response:
        counts = views.workflow_counts(ui.store)
        rows = [(name, counts.get(name, {}), ui.latest(name)) for name in ui.workflow_names()]
        return page(request, "workflows.html", {"rows": rows, "statuses": views.STATUSES})

    @app.get("/limits", response_class=HTMLResponse, include_in_schema=False)
    def limits_page(request: Request) -> Response:
        rows = views.limit_rows(ui.store, ui.machines, ui.clock.now())
        return page(request, "limits.html", {"rows": rows})

    @app.get("/workflows/{name}", response_class=HTMLResponse, include_in_schema=False)
    def workflow_page(request: Request, name: str) -> Response:
        states = views.state_counts(ui.store, name)
        loaded = {m.fingerprint: m.version for m in ui.machines if m.id == name}
        versions = views.versions_of(ui.store, name, loaded)
        machine = ui.latest(name)
        if machine is None and not versions:
            message = f"No runs or definition named {name!r}."
            return page(
                request, "error.html", {"title": "No such workflow", "message": message}, 404
            )
        active = {leaf: c.get("active", 0) for leaf, c in states.items() if c.get("active")}
        diagram, note = None, None
        if machine is None:
            note = "No definition of this workflow is loaded (start the UI with --machines)."
        else:
            try:
                diagram = heat_svg(ui.cache, machine, active, runs_link(name))
            except DiagramUnavailable as exc:
                note = str(exc)
        rows = sorted(states.items(), key=lambda item: (-item[1].get("active", 0), item[0]))
        return page(
            request,
            "workflow.html",
            {
                "name": name,
                "machine": machine,
                "diagram": diagram,
                "diagram_note": note,
                "versions": versions,
                "states": rows,
                "statuses": views.STATUSES,
                "active_total": sum(active.values()),
            },
        )

    # -- actions ----------------------------------------------------------------------------
    def _act(request: Request, csrf: str) -> Runtime | Response:
        """The runtime to act through, or the refusal to send back."""
        if not csrf_ok(request, csrf):
            return page(
                request,
                "error.html",
                {
                    "title": "Refused",
                    "message": "The form's security token did "
                    "not match (CSRF protection). Reload the "
                    "page and try again.",
                },
                403,
            )
        if ui.runtime is None or ui.read_only:
            return page(
                request,
                "error.html",
                {"title": "Read-only", "message": "This UI does not take actions."},
                403,
            )
        return ui.runtime

    def _done(run_id: str, what: str) -> Response:
        return RedirectResponse(f"/runs/{run_id}?{urlencode({'done': what})}", status_code=303)

    @app.post("/runs/{run_id}/send", include_in_schema=False)
    def send_event(
        request: Request,
        run_id: str,
        event_type: Annotated[str, Form()],
        csrf_token: Annotated[str, Form()] = "",
        payload: Annotated[str, Form()] = "",
    ) -> Response:
        runtime = _act(request, csrf_token)
        if isinstance(runtime, Response):
            return runtime
        try:
            event = _event(event_type, payload)
            runtime.send(run_id, event)
        except ValueError as exc:
            return _run_view(request, run_id, error=str(exc), status=400)
        except RunFinishedError:
            return _run_view(
                request, run_id, error="The run has ended; it takes no more events.", status=409
            )
        except RunNotFoundError:
            raise HTTPException(404, "no such run") from None
        log.info("ui: event %s sent to run %s", event["type"], run_id)
        return _done(run_id, "sent")

    @app.post("/runs/{run_id}/retry", include_in_schema=False)
    def retry_now(
        request: Request,
        run_id: str,
        timer_id: Annotated[str, Form()],
        csrf_token: Annotated[str, Form()] = "",
    ) -> Response:
        runtime = _act(request, csrf_token)
        if isinstance(runtime, Response):
            return runtime
        try:
            run = ui.store.get_run(run_id)
        except RunNotFoundError:
            raise HTTPException(404, "no such run") from None
        timer = next(
            (t for t in timers_of(run.snapshot) if t.id == timer_id and t.retry_of is not None),
            None,
        )
        if timer is None or run.terminal:
            return _run_view(
                request,
                run_id,
                status=409,
                error=(
                    "That call is no longer waiting to retry (it may have been retried already)."
                ),
            )
        try:
            # The wait's own timer event, delivered now: the same transition the timer takes.
            runtime.send(run_id, timer.event)
        except RunFinishedError:
            return _run_view(request, run_id, error="The run has ended.", status=409)
        log.info("ui: retry now of %s in run %s", timer.retry_of, run_id)
        return _done(run_id, "retried")

    @app.post("/runs/{run_id}/cancel", include_in_schema=False)
    def cancel_run(
        request: Request,
        run_id: str,
        csrf_token: Annotated[str, Form()] = "",
        reason: Annotated[str, Form()] = "",
    ) -> Response:
        runtime = _act(request, csrf_token)
        if isinstance(runtime, Response):
            return runtime
        try:
            outcome = runtime.cancel(run_id, reason.strip()[:500] or "cancelled from the UI")
        except RunNotFoundError:
            raise HTTPException(404, "no such run") from None
        log.info("ui: cancel of run %s: %s", run_id, outcome)
        return _done(run_id, outcome)

    @app.post("/runs/{run_id}/resume", include_in_schema=False)
    def resume_run(
        request: Request, run_id: str, csrf_token: Annotated[str, Form()] = ""
    ) -> Response:
        runtime = _act(request, csrf_token)
        if isinstance(runtime, Response):
            return runtime
        try:
            runtime.resume(run_id)
        except RunNotFoundError:
            raise HTTPException(404, "no such run") from None
        except (NotResumableError, RunFinishedError) as exc:
            return _run_view(request, run_id, error=f"Not resumed: {exc}", status=409)
        log.info("ui: resume of run %s", run_id)
        return _done(run_id, "resumed")

    @app.post("/runs/{run_id}/fork", include_in_schema=False)
    def fork_run(
        request: Request,
        run_id: str,
        step: Annotated[int, Form()],
        csrf_token: Annotated[str, Form()] = "",
    ) -> Response:
        return _from_step(request, run_id, step, csrf_token, "forked")

    @app.post("/runs/{run_id}/reset", include_in_schema=False)
    def reset_run(
        request: Request,
        run_id: str,
        step: Annotated[int, Form()],
        csrf_token: Annotated[str, Form()] = "",
    ) -> Response:
        return _from_step(request, run_id, step, csrf_token, "reset")

    def _from_step(
        request: Request, run_id: str, step: int, csrf_token: str, what: str
    ) -> Response:
        """A fork (`what` "forked": the new run's page) or a reset ("reset") from a step."""
        runtime = _act(request, csrf_token)
        if isinstance(runtime, Response):
            return runtime
        try:
            run = (runtime.fork if what == "forked" else runtime.reset)(run_id, step)
        except RunNotFoundError:
            raise HTTPException(404, "no such run") from None
        except NotRestorableError as exc:
            return _run_view(request, run_id, error=f"Not {what}: {exc}", status=409)
        log.info("ui: run %s %s from step %d: %s", run_id, what, step, run.id)
        return _done(run.id, what)

    # -- login ------------------------------------------------------------------------------
    @app.get("/login", response_class=HTMLResponse, include_in_schema=False)
    def login_form(request: Request) -> Response:
        return page(request, "login.html", {"next": "/", "failed": False, "plain": True})

    @app.post("/login", include_in_schema=False)
    def login(
        request: Request,
        token: Annotated[str, Form()],
        csrf_token: Annotated[str, Form()] = "",
        next_path: Annotated[str, Form(alias="next")] = "/",
    ) -> Response:
        # Only a path on this server: never an open redirect to another site.
        safe = next_path.startswith("/") and not next_path.startswith(("//", "/\\"))
        target = next_path if safe else "/"
        if not ui.token:
            return RedirectResponse("/", status_code=303)
        if not csrf_ok(request, csrf_token):
            return page(request, "login.html", {"next": target, "failed": True, "plain": True}, 403)
        if not same_token(token, ui.token):
            log.warning("ui: failed login from %s", request.client.host if request.client else "?")
            return page(request, "login.html", {"next": target, "failed": True, "plain": True}, 401)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            session_value(ui.token),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    @app.post("/logout", include_in_schema=False)
    def logout(request: Request, csrf_token: Annotated[str, Form()] = "") -> Response:
        response = RedirectResponse("/login" if ui.token else "/", status_code=303)
        if csrf_ok(request, csrf_token):
            response.delete_cookie(SESSION_COOKIE)
        return response

    # -- JSON API ---------------------------------------------------------------------------
    @app.get("/api/runs", response_model=api.RunPage, tags=["runs"])
    def api_runs(
        workflow: str = "",
        status: str = "",
        state: str = "",
        key: str = "",
        age: str = "",
        where: str = "",
        page: Annotated[int, Query(ge=1, le=views.MAX_PAGE)] = 1,
        page_size: Annotated[int, Query(ge=1, le=500)] = 50,
    ) -> api.RunPage:
        """Runs matching the filters (as on the runs page), newest first, with counts per
        status. `status` may also be `stuck`; `age` one of 1h, 24h, 7d, older-1h, older-24h,
        older-7d; `where` search attributes, `NAME=VALUE` terms separated by commas (all
        must hold; values compared as text), e.g. `customer=42,region=eu`."""
        filters = views.Filters(workflow, status, state, key, age, where)
        try:
            listing = views.run_list(
                ui.store, filters, page, page_size, ui.clock.now(), ui.stuck_after_ms, attention=0
            )
        except views.FilterError as exc:
            raise HTTPException(422, str(exc)) from None
        return api.page_out(listing)

    @app.get(
        "/api/runs/{run_id}",
        response_model=RunDetailOut,
        tags=["runs"],
        responses={404: {"description": "no run has this id"}},
    )
    def api_run(run_id: str) -> RunDetailOut:
        """One run: where it is, its context (secret-looking keys hidden), pending timers,
        retries, queued events, recent effects and its journal, newest first."""
        try:
            return run_out(ui.store, run_id)
        except RunNotFoundError:
            raise HTTPException(404, f"no run with id {run_id!r}") from None

    @app.exception_handler(StoreError)
    async def store_down(request: Request, exc: StoreError) -> Response:
        log.warning("ui: store error on %s: %s", request.url.path, type(exc).__name__)
        return page(
            request,
            "error.html",
            {
                "title": "Store unavailable",
                "message": "The run store could not answer; try again shortly.",
            },
            503,
        )

    if token:
        document_token(app, "STATECHARTS_UI_TOKEN")
    return app


def _event(event_type: str, payload: str) -> dict[str, Any]:
    """The event the send form describes; `ValueError` with a clear message if it is bad."""
    event_type = event_type.strip()
    if not event_type:
        raise ValueError("event type: give the event's type, e.g. APPROVE")
    if len(event_type) > 200:
        raise ValueError("event type: longer than 200 characters")
    if event_type.startswith(RESERVED_PREFIXES):
        raise ValueError(
            f"event type: {event_type!r} is internal to the engine; use the "
            "Retry now and Cancel buttons instead"
        )
    fields: Any = {}
    if payload.strip():
        try:
            fields = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"payload: not valid JSON ({exc})") from None
        if not isinstance(fields, dict):
            raise ValueError('payload: must be a JSON object, e.g. {"amount": 10}')
        if "type" in fields:
            raise ValueError('payload: must not contain "type" (give it as the event type)')
    return {"type": event_type, **fields}


def _run_diagram(ui: UI, detail: RunDetail) -> tuple[str | None, str | None, list[str]]:
    """(SVG, note when there is none, event types the run accepts now)."""
    run = detail.run
    machine = ui.machine_for(run)
    if machine is None:
        return (
            None,
            (
                f"No loaded definition of {run.workflow_name} matches this run's version "
                f"{views.short_version(run.workflow_version)}; start the UI with the "
                "--machines that define it to see the diagram."
            ),
            [],
        )
    try:
        snapshot = machine.restore(run.snapshot)
    except Exception as exc:  # a snapshot this definition cannot read: say so, show the rest
        return None, f"The run's snapshot does not restore with the loaded definition: {exc}", []
    accepts = _accepted_events(snapshot) if not run.terminal else []
    try:
        return (
            run_svg(
                ui.cache,
                machine,
                snapshot,
                runs_link(run.workflow_name),
                views.child_notes(detail, snapshot),
            ),
            None,
            accepts,
        )
    except DiagramUnavailable as exc:
        return None, str(exc), accepts


def _accepted_events(snapshot: Snapshot) -> list[str]:
    """Event types of the transitions out of the active states (engine-internal ones left out)."""
    found: list[str] = []
    for state_id in sorted(snapshot.configuration.ids):
        node = snapshot.machine.definition.by_id[state_id]
        for transition in node.transitions:
            event = transition.event
            if (
                event
                and not event.startswith(RESERVED_PREFIXES)
                and event != "*"
                and event not in found
            ):
                found.append(event)
    return found


def _state_choices(machine: Machine | None) -> list[str]:
    """State paths of a workflow for the state filter (document order)."""
    if machine is None:
        return []
    return [
        ".".join(node.path)
        for node in machine.definition.nodes
        if node.path and node.type != "history"
    ]


def _filters(env: Environment, ui: UI) -> None:
    """Template helpers (all return text; the templates escape it)."""
    env.filters["iso"] = views.iso_time
    env.filters["ago"] = lambda ms: views.relative_time(ms, ui.clock.now())
    env.filters["json"] = json_text
    env.filters["short"] = views.short_version
    env.filters["error_text"] = error_text
    env.globals["event_type"] = views.event_type
    env.globals["event_payload"] = views.event_payload
    env.globals["leaves"] = views.leaves
    env.globals["run_error"] = run_error
    env.globals["error_is_current"] = error_is_current
    env.globals["is_stuck"] = lambda run: views.is_stuck(run, ui.clock.now(), ui.stuck_after_ms)
    env.globals["heat_fills"] = HEAT_FILLS
    env.globals["query"] = lambda params: urlencode(params)
