"""What every route of the operator UI shares: the store, the loaded definitions and the
runtime acting through them, the settings the app was made with, and the templates a page is
rendered with (`UI.page`). A route reaches it as a parameter typed `Site` (a FastAPI
dependency reading `app.state.ui`, set by `create_app`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import Depends, Request
from fastapi.responses import Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.templating import Jinja2Templates

from persistence.columns import error_is_current
from persistence.runtime import Clock, Runtime
from persistence.stores import RunRecord, Store
from persistence.ui import views
from persistence.ui.diagrams import HEAT_FILLS, SvgCache
from persistence.ui.security import CSRF_FIELD, csrf_value
from persistence.web.runs import error_text, json_text, run_error
from statecharts import Machine

HERE = Path(__file__).parent


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
    templates: Jinja2Templates = field(init=False)

    def __post_init__(self) -> None:
        if self.machines:
            self.runtime = Runtime(self.store, self.machines, clock=self.clock, check_schema=False)
        self.by_fingerprint = {m.fingerprint: m for m in self.machines}
        # Autoescape everything: run data (contexts, events, errors) is shown as text, never HTML.
        autoescape = select_autoescape(default=True, default_for_string=True)
        env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=autoescape)
        _helpers(env, self)
        self.templates = Jinja2Templates(env=env)

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

    def page(
        self, request: Request, name: str, context: Mapping[str, Any], status: int = 200
    ) -> Response:
        """The template `name` rendered with `context` (and what every page uses: this UI,
        the form's CSRF value, the time now)."""
        base = {
            "ui": self,
            "csrf": csrf_value(request),
            "csrf_field": CSRF_FIELD,
            "now": self.clock.now(),
        }
        return self.templates.TemplateResponse(
            request, name, {**base, **context}, status_code=status
        )

    def error_page(self, request: Request, title: str, message: str, status: int) -> Response:
        """The error page with `title` and `message`, answered with `status`."""
        return self.page(request, "error.html", {"title": title, "message": message}, status)


def current_ui(request: Request) -> UI:
    """The UI of the app serving `request` (a FastAPI dependency)."""
    ui: UI = request.app.state.ui
    return ui


Site = Annotated[UI, Depends(current_ui)]
"""A route's parameter of this type receives the app's `UI`."""


def _helpers(env: Environment, ui: UI) -> None:
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
