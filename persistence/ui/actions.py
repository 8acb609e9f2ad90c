"""The operator UI's actions, posted from a run's page: send an event, retry a waiting call
now, cancel, resume a failed run, fork or reset it from a journal row. Each goes through
`persistence.runtime.Runtime`, the same API code uses, so leases, versions and the journal
apply to it exactly as to code; each form's CSRF value is checked first, and a read-only UI
refuses them all. Done, the browser is sent back to the run's page saying what happened.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any
from urllib.parse import urlencode

import orjson
from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import RedirectResponse, Response

from persistence.lifecycle import NotRestorableError
from persistence.runtime import NotResumableError, Runtime
from persistence.stores import RunFinishedError, RunNotFoundError
from persistence.ui.pages import run_view
from persistence.ui.security import csrf_ok
from persistence.ui.site import UI, Site
from persistence.web.inbound import RESERVED_PREFIXES
from persistence.web.runs import timers_of

log = logging.getLogger("statecharts.ui")
router = APIRouter(include_in_schema=False)


@router.post("/runs/{run_id}/send")
def send_event(
    request: Request,
    ui: Site,
    run_id: str,
    event_type: Annotated[str, Form()],
    csrf_token: Annotated[str, Form()] = "",
    payload: Annotated[str, Form()] = "",
) -> Response:
    """Send the run an event: its type and a JSON object of its other fields."""
    runtime = _act(ui, request, csrf_token)
    if isinstance(runtime, Response):
        return runtime
    try:
        event = _event(event_type, payload)
        runtime.send(run_id, event)
    except ValueError as exc:
        return run_view(ui, request, run_id, error=str(exc), status=400)
    except RunFinishedError:
        return run_view(
            ui, request, run_id, error="The run has ended; it takes no more events.", status=409
        )
    except RunNotFoundError:
        raise HTTPException(404, "no such run") from None
    log.info("ui: event %s sent to run %s", event["type"], run_id)
    return _done(run_id, "sent")


@router.post("/runs/{run_id}/retry")
def retry_now(
    request: Request,
    ui: Site,
    run_id: str,
    timer_id: Annotated[str, Form()],
    csrf_token: Annotated[str, Form()] = "",
) -> Response:
    """Retry a call waiting to retry now, instead of when its wait ends."""
    runtime = _act(ui, request, csrf_token)
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
        return run_view(
            ui,
            request,
            run_id,
            status=409,
            error="That call is no longer waiting to retry (it may have been retried already).",
        )
    try:
        # The wait's own timer event, delivered now: the same transition the timer takes.
        runtime.send(run_id, timer.event)
    except RunFinishedError:
        return run_view(ui, request, run_id, error="The run has ended.", status=409)
    log.info("ui: retry now of %s in run %s", timer.retry_of, run_id)
    return _done(run_id, "retried")


@router.post("/runs/{run_id}/cancel")
def cancel_run(
    request: Request,
    ui: Site,
    run_id: str,
    csrf_token: Annotated[str, Form()] = "",
    reason: Annotated[str, Form()] = "",
) -> Response:
    """Cancel the run (at once at rest, else by its worker at its next step)."""
    runtime = _act(ui, request, csrf_token)
    if isinstance(runtime, Response):
        return runtime
    try:
        outcome = runtime.cancel(run_id, reason.strip()[:500] or "cancelled from the UI")
    except RunNotFoundError:
        raise HTTPException(404, "no such run") from None
    log.info("ui: cancel of run %s: %s", run_id, outcome)
    return _done(run_id, outcome)


@router.post("/runs/{run_id}/resume")
def resume_run(
    request: Request, ui: Site, run_id: str, csrf_token: Annotated[str, Form()] = ""
) -> Response:
    """Resume a failed run from the state it failed in."""
    runtime = _act(ui, request, csrf_token)
    if isinstance(runtime, Response):
        return runtime
    try:
        runtime.resume(run_id)
    except RunNotFoundError:
        raise HTTPException(404, "no such run") from None
    except (NotResumableError, RunFinishedError) as exc:
        return run_view(ui, request, run_id, error=f"Not resumed: {exc}", status=409)
    log.info("ui: resume of run %s", run_id)
    return _done(run_id, "resumed")


@router.post("/runs/{run_id}/fork")
def fork_run(
    request: Request,
    ui: Site,
    run_id: str,
    step: Annotated[int, Form()],
    csrf_token: Annotated[str, Form()] = "",
) -> Response:
    """A new run from the state the run had after `step` (the original untouched)."""
    return _from_step(ui, request, run_id, step, csrf_token, "forked")


@router.post("/runs/{run_id}/reset")
def reset_run(
    request: Request,
    ui: Site,
    run_id: str,
    step: Annotated[int, Form()],
    csrf_token: Annotated[str, Form()] = "",
) -> Response:
    """The run itself back to the state it had after `step` (its journal kept)."""
    return _from_step(ui, request, run_id, step, csrf_token, "reset")


def _from_step(
    ui: UI, request: Request, run_id: str, step: int, csrf_token: str, what: str
) -> Response:
    """A fork (`what` "forked": the new run's page) or a reset ("reset") from a step."""
    runtime = _act(ui, request, csrf_token)
    if isinstance(runtime, Response):
        return runtime
    try:
        run = (runtime.fork if what == "forked" else runtime.reset)(run_id, step)
    except RunNotFoundError:
        raise HTTPException(404, "no such run") from None
    except NotRestorableError as exc:
        return run_view(ui, request, run_id, error=f"Not {what}: {exc}", status=409)
    log.info("ui: run %s %s from step %d: %s", run_id, what, step, run.id)
    return _done(run.id, what)


def _act(ui: UI, request: Request, csrf: str) -> Runtime | Response:
    """The runtime to act through, or the refusal to send back."""
    if not csrf_ok(request, csrf):
        message = (
            "The form's security token did not match (CSRF protection). Reload the page and "
            "try again."
        )
        return ui.error_page(request, "Refused", message, 403)
    if ui.runtime is None or ui.read_only:
        return ui.error_page(request, "Read-only", "This UI does not take actions.", 403)
    return ui.runtime


def _done(run_id: str, what: str) -> Response:
    return RedirectResponse(f"/runs/{run_id}?{urlencode({'done': what})}", status_code=303)


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
