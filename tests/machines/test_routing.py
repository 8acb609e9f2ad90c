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


@pytest.mark.parametrize(
    ("stage", "action", "reason"),
    [
        ("Proposal", REGISTER, "entered Proposal"),
        ("Negotiation", REGISTER, "entered Negotiation"),
        ("Won", CLOSE, "won"),
        ("Lost", CLOSE, "lost"),
        ("Lead", CLOSE, "left scope (Lead)"),
        (None, IGNORE, "no stage in the event"),
        ("", IGNORE, "no stage in the event"),
    ],
)
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
    assert stage_filter_problem([], CRM_STAGES) == "the stage filter is empty: no deal is in scope"


def test_reconcile_registers_unwatched_deals_and_closes_departed_watches() -> None:
    deals = [{"id": "D1", "name": "Acme"}, {"id": "D2", "name": "Globex"}]
    plan = reconcile(deals, {"D2", "D9"})
    assert [d["id"] for d in plan.to_register] == ["D1"]
    assert plan.to_close == ("D9",)
    assert reconcile(deals, {"D1", "D2"}).to_register == ()


def test_the_scope_health_rule() -> None:
    from datetime import date

    from machines.followup.routing import scope_health_problem

    monday, tuesday = date(2026, 3, 2), date(2026, 3, 3)
    zero = {"today": "2026-03-02", "in_scope": 0, "open_deals": 3}
    assert scope_health_problem([], 0, 3, monday) is None, "a first quiet run may be a quiet day"
    assert scope_health_problem([zero], 0, 3, monday) is None
    assert "for 1 business day(s) (since 2026-03-02)" in str(
        scope_health_problem([zero], 0, 3, tuesday)
    )
    assert scope_health_problem([zero], 0, 3, tuesday, holidays={tuesday}) is None
    assert scope_health_problem([zero], 0, 0, tuesday) is None, "no open deal: nothing missed"
    assert scope_health_problem([zero], 2, 3, tuesday) is None
    dropped = scope_health_problem([{**zero, "in_scope": 4}], 0, 3, monday)
    assert dropped is not None and "4 were in scope on 2026-03-02" in dropped
