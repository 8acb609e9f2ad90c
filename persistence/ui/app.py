"""The operator's web app (FastAPI): runs list, run page, workflow pages, actions and the JSON
API, over any store.

`create_app(store, machines)` builds it from the UI's routers (`pages`, `actions`, `login`,
`api`) around what they share (`site.UI`), behind the token and CSRF guard (`security`);
`persistence.ui.cli` serves it with uvicorn. Actions (send an event, retry a waiting call now,
cancel, ...) go through `persistence.runtime.Runtime`, the same API code uses, so leases,
versions and the journal apply to them exactly as to code.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles
from starlette.requests import ClientDisconnect

from persistence.runtime import Clock
from persistence.stores import Store, StoreError
from persistence.ui import actions, api, login, pages
from persistence.ui.security import Guard
from persistence.ui.site import HERE, UI
from persistence.web.access import document_token
from persistence.web.inbound import client_gone
from statecharts import Machine

log = logging.getLogger("statecharts.ui")


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
    app = FastAPI(
        title="statecharts runs",
        version="1",
        docs_url=None,
        redoc_url=None,
        description="Durable statechart runs: list, inspect, act.",
    )
    app.state.ui = ui

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
        context = {"next": request.url.path, "failed": False, "plain": True}
        return ui.page(request, "login.html", context, 401)

    async def store_down(request: Request, exc: Exception) -> Response:
        log.warning("ui: store error on %s: %s", request.url.path, type(exc).__name__)
        message = "The run store could not answer; try again shortly."
        return ui.error_page(request, "Store unavailable", message, 503)

    app.add_middleware(Guard, token=token, unauthorized=unauthorized)
    app.add_exception_handler(ClientDisconnect, client_gone)
    app.add_exception_handler(StoreError, store_down)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    for routes in (pages.router, actions.router, login.router, api.router):
        app.include_router(routes)
    if token:
        document_token(app, "STATECHARTS_UI_TOKEN")
    return app
