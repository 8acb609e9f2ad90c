"""The operator UI's JSON API (`/api/runs`, `/api/runs/{run_id}`), documented in the OpenAPI
schema at `/openapi.json`. A run reads as the ingress answers it (`persistence.web.responses`);
the runs list's page is the UI's own. Secret-looking keys in contexts and events are hidden
here as on the pages."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query
from pydantic import BaseModel, Field

from persistence.stores import RunNotFoundError
from persistence.ui import views
from persistence.ui.site import Site
from persistence.web.responses import RunDetailOut, RunSummary, run_out, summary

router = APIRouter(tags=["runs"])


class RunPage(BaseModel):
    """A page of runs matching the filters, newest first."""

    runs: list[RunSummary]
    total: int = Field(description="runs matching every filter")
    counts: dict[str, int] = Field(description="runs per status under the other filters")
    stuck: int = Field(description="active runs not updated for the stuck threshold")
    page: int
    page_size: int


def page_out(listing: views.RunList) -> RunPage:
    """A runs-list page as JSON."""
    return RunPage(
        runs=[summary(r) for r in listing.runs],
        total=listing.total,
        counts=listing.counts,
        stuck=listing.stuck,
        page=listing.page,
        page_size=listing.page_size,
    )


@router.get("/api/runs", response_model=RunPage)
def api_runs(
    ui: Site,
    filters: Annotated[views.Filters, Depends()],
    page: Annotated[int, Query(ge=1, le=views.MAX_PAGE)] = 1,
    page_size: Annotated[int, Query(ge=1, le=500)] = 50,
) -> RunPage:
    """Runs matching the filters (as on the runs page), newest first, with counts per
    status. `status` may also be `stuck`; `age` one of 1h, 24h, 7d, older-1h, older-24h,
    older-7d; `where` search attributes, `NAME=VALUE` terms separated by commas (all
    must hold; values compared as text), e.g. `customer=42,region=eu`."""
    try:
        listing = views.run_list(
            ui.store, filters, page, page_size, ui.clock.now(), ui.stuck_after_ms, attention=0
        )
    except views.FilterError as exc:
        raise HTTPException(422, str(exc)) from None
    return page_out(listing)


@router.get(
    "/api/runs/{run_id}",
    response_model=RunDetailOut,
    responses={404: {"description": "no run has this id"}},
)
def api_run(ui: Site, run_id: str) -> RunDetailOut:
    """One run: where it is, its context (secret-looking keys hidden), pending timers,
    retries, queued events, recent effects and its journal, newest first."""
    try:
        return run_out(ui.store, run_id)
    except RunNotFoundError:
        raise HTTPException(404, f"no run with id {run_id!r}") from None
