"""The JSON API behind the pages (`/api/runs`, `/api/runs/{id}`): the runs list's page model
that FastAPI puts into the OpenAPI schema at `/openapi.json`, and its conversion from store
records. A run's own JSON is the one the ingress answers too (`persistence.web.responses`)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from persistence.ui.views import RunList
from persistence.web.responses import RunSummary, summary


class RunPage(BaseModel):
    """A page of runs matching the filters, newest first."""

    runs: list[RunSummary]
    total: int = Field(description="runs matching every filter")
    counts: dict[str, int] = Field(description="runs per status under the other filters")
    stuck: int = Field(description="active runs not updated for the stuck threshold")
    page: int
    page_size: int


def page_out(listing: RunList) -> RunPage:
    """A runs-list page as JSON."""
    return RunPage(
        runs=[summary(r) for r in listing.runs],
        total=listing.total,
        counts=listing.counts,
        stuck=listing.stuck,
        page=listing.page,
        page_size=listing.page_size,
    )
