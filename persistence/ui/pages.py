"""The operator UI's pages: the runs list, a run's page (its diagram with the active states,
the events it accepts, its journal and calls), the workflows, one workflow's heat map and
versions, and the named limits.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response

from persistence.stores import RunNotFoundError
from persistence.ui import views
from persistence.ui.diagrams import DiagramUnavailable, heat_svg, run_svg, runs_link
from persistence.ui.site import UI, Site
from persistence.web.inbound import RESERVED_PREFIXES
from persistence.web.runs import RunDetail, run_detail
from statecharts import Machine, Snapshot
from statecharts.render.graphviz import ACTIVE_FILL
from statecharts.render.timeline import engine_event_phrase

router = APIRouter(include_in_schema=False)

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
"""What a run's page says after an action (`?done=`), by the action's outcome."""


@router.get("/", response_class=HTMLResponse)
def runs_page(
    request: Request,
    ui: Site,
    filters: Annotated[views.Filters, Depends()],
    page_number: Annotated[int, Query(alias="page", ge=1, le=views.MAX_PAGE)] = 1,
) -> Response:
    """The runs matching the filters, newest first, the stuck and failed ones on top."""
    try:
        listing = views.run_list(
            ui.store, filters, page_number, ui.page_size, ui.clock.now(), ui.stuck_after_ms
        )
    except views.FilterError as exc:
        return ui.error_page(request, "Bad filter", str(exc), 422)
    states = _state_choices(ui.latest(filters.workflow)) if filters.workflow else []
    return ui.page(
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


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, ui: Site, run_id: str, done: str = "") -> Response:
    """One run's page (with the message of the action just taken, `done`)."""
    return run_view(ui, request, run_id, message=DONE_MESSAGES.get(done))


def run_view(
    ui: UI,
    request: Request,
    run_id: str,
    message: str | None = None,
    error: str | None = None,
    status: int = 200,
) -> Response:
    """A run's page, with a `message` or an `error` (an action's) above it."""
    try:
        detail = run_detail(ui.store, run_id)
    except RunNotFoundError:
        return ui.error_page(request, "No such run", f"No run has the id {run_id!r}.", 404)
    diagram, diagram_note, accepts = _run_diagram(ui, detail)
    stuck = views.is_stuck(detail.run, ui.clock.now(), ui.stuck_after_ms)
    machine = ui.machine_for(detail.run)
    return ui.page(
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


@router.get("/workflows", response_class=HTMLResponse)
def workflows_page(request: Request, ui: Site) -> Response:
    """Every workflow with its runs per status."""
    counts = views.workflow_counts(ui.store)
    rows = [(name, counts.get(name, {}), ui.latest(name)) for name in ui.workflow_names()]
    return ui.page(request, "workflows.html", {"rows": rows, "statuses": views.STATUSES})


@router.get("/limits", response_class=HTMLResponse)
def limits_page(request: Request, ui: Site) -> Response:
    """The named limits with their use now."""
    rows = views.limit_rows(ui.store, ui.machines, ui.clock.now())
    return ui.page(request, "limits.html", {"rows": rows})


@router.get("/workflows/{name}", response_class=HTMLResponse)
def workflow_page(request: Request, ui: Site, name: str) -> Response:
    """One workflow: its heat map (active runs per state), its states and versions."""
    states = views.state_counts(ui.store, name)
    loaded = {m.fingerprint: m.version for m in ui.machines if m.id == name}
    versions = views.versions_of(ui.store, name, loaded)
    machine = ui.latest(name)
    if machine is None and not versions:
        message = f"No runs or definition named {name!r}."
        return ui.error_page(request, "No such workflow", message, 404)
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
    return ui.page(
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
