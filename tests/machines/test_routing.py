"""The routing decisions: stage changes, the stage filter check, reconciliation."""

from __future__ import annotations

import pytest

from machines.followup.routing import (
    CLOSE,
    DEFAULT_STAGES,
    IGNORE,
    REGISTER,
    reconcile,
    route_stage_change,
    stage_filter_problem,
)

CRM_STAGES = ["Lead", "Proposal", "Negotiation", "Won", "Lost"]


@pytest.mark.parametrize(("stage", "action", "reason"), [
    ("Proposal", REGISTER, "entered Proposal"),
    ("Negotiation", REGISTER, "entered Negotiation"),
    ("Won", CLOSE, "won"),
    ("Lost", CLOSE, "lost"),
    ("Lead", CLOSE, "left scope (Lead)"),
    (None, IGNORE, "no stage in the event"),
    ("", IGNORE, "no stage in the event"),
])
def test_route_stage_change(stage: str | None, action: str, reason: str) -> None:
    route = route_stage_change(stage, DEFAULT_STAGES)
    assert (route.action, route.reason) == (action, reason)


def test_stage_names_are_matched_exactly() -> None:
    assert route_stage_change("proposal", DEFAULT_STAGES).action == CLOSE


def test_a_filter_that_matches_the_crm_is_fine() -> None:
    assert stage_filter_problem(DEFAULT_STAGES, CRM_STAGES) is None


def test_a_filter_that_matches_nothing_is_a_problem_naming_the_crm_stages() -> None:
    problem = stage_filter_problem(["Proposal Sent", "Negotiating"], CRM_STAGES)
    assert problem is not None
    assert "matches no CRM stage" in problem
    assert "'Proposal Sent' (did you mean 'Proposal'?)" in problem
    assert "['Lead', 'Lost', 'Negotiation', 'Proposal', 'Won']" in problem


def test_a_partly_unknown_filter_is_a_problem_too() -> None:
    problem = stage_filter_problem(["Proposal", "Negotiating"], CRM_STAGES)
    assert problem is not None and "does not know" in problem and "'Negotiating'" in problem


def test_an_empty_filter_is_a_problem() -> None:
    assert stage_filter_problem([], CRM_STAGES) == \
        "the stage filter is empty: no deal is in scope"


def test_reconcile_registers_unwatched_deals_and_closes_departed_watches() -> None:
    deals = [{"id": "D1", "name": "Acme"}, {"id": "D2", "name": "Globex"}]
    plan = reconcile(deals, {"D2", "D9"})
    assert [d["id"] for d in plan.to_register] == ["D1"]
    assert plan.to_close == ("D9",)
    assert reconcile(deals, {"D1", "D2"}).to_register == ()
