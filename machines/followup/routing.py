"""The routing decisions of the follow-up workflows, as pure functions.

- ``route_stage_change``: what a CRM webhook about a deal's stage means for its watch.
- ``stage_filter_problem``: the loud check that the configured stage names exist in the CRM
  (the original system's filter matched nothing for five days while every run "succeeded").
- ``scope_health_problem``: the "succeeds but does nothing" rule: a filter naming stages that
  exist but hold no deal (``Qualified`` for ``Proposal``) leaves every run green and idle.
- ``unknown_stage_problem``: a webhook whose stage the CRM or the filter does not know (a stage
  rename) must not close a watch silently.
- ``reconcile``: which in-scope deals lack a watch, and which watches lost their deal.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from machines.followup.business_days import business_days_between

DEFAULT_STAGES = ("Proposal", "Negotiation")
CLOSING_STAGES: Mapping[str, str] = {"Won": "won", "Lost": "lost"}
REGISTER, CLOSE, IGNORE = "register", "close", "ignore"


@dataclass(frozen=True)
class Route:
    """What to do with a stage change: ``register``, ``close`` (with ``reason``) or
    ``ignore``."""

    action: str
    reason: str


def route_stage_change(stage: str | None, in_scope: Collection[str]) -> Route:
    """A deal that entered ``stage``: watch it while it is in scope, close its watch when it
    is won or lost or leaves scope. Registering is idempotent, so a deal moving between two
    in-scope stages keeps its running cadence."""
    if not stage:
        return Route(IGNORE, "no stage in the event")
    if stage in in_scope:
        return Route(REGISTER, f"entered {stage}")
    if stage in CLOSING_STAGES:
        return Route(CLOSE, CLOSING_STAGES[stage])
    return Route(CLOSE, f"left scope ({stage})")


class StageFilterMatchesNothing(Exception):
    """Configured stage names that the CRM does not have: every deal would be ignored."""


def stage_filter_problem(in_scope: Sequence[str], crm_stages: Collection[str]) -> str | None:
    """A message naming each configured stage the CRM does not know, or None if all match."""
    unknown = [name for name in in_scope if name not in crm_stages]
    if not in_scope:
        return "the stage filter is empty: no deal is in scope"
    if not unknown:
        return None
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, list(crm_stages), n=1, cutoff=0.5)
        hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    scope = (
        "matches no CRM stage"
        if len(unknown) == len(in_scope)
        else "has stage names the CRM does not know"
    )
    return (
        f"stage filter {list(in_scope)} {scope}: {', '.join(hints)}; the CRM's stages are "
        f"{sorted(crm_stages)}"
    )


class NothingInScope(Exception):
    """The health rule: the CRM has open deals but none is in scope (for a business day, or
    suddenly after some were)."""


def scope_health_problem(
    history: Sequence[Mapping[str, Any]],
    in_scope: int,
    open_deals: int,
    today: date,
    holidays: Collection[date] = (),
) -> str | None:
    """Why a run that finds ``in_scope`` deals (of ``open_deals`` open ones) is unhealthy, or
    None. ``history``: earlier runs' ``{"today", "in_scope", "open_deals"}``, oldest first.

    Unhealthy while nothing is in scope but the CRM has open deals, and either some deals were
    in scope before (the count dropped to zero) or the zero count has lasted a business day.
    """
    if in_scope > 0 or open_deals == 0:
        return None
    counted = [h for h in history if h.get("in_scope") is not None and h.get("today")]
    last_seen = next((h for h in reversed(counted) if int(h["in_scope"]) > 0), None)
    if last_seen is not None:
        return (
            f"no deal is in scope but the CRM has {open_deals} open deal(s); "
            f"{last_seen['in_scope']} were in scope on {last_seen['today']}: did the "
            "stage filter or a stage name change?"
        )
    first_zero = date.fromisoformat(str(counted[0]["today"])) if counted else today
    days = business_days_between(first_zero, today, holidays)
    if days >= 1:
        return (
            f"no deal has been in scope for {days} business day(s) (since {first_zero}) "
            f"while the CRM has {open_deals} open deal(s): is the stage filter the right "
            "one?"
        )
    return None


class UnknownStage(Exception):
    """A webhook names a stage that the CRM does not have, or the stage filter names stages the
    CRM no longer has (a rename): closing the watch would be silent and wrong."""


def unknown_stage_problem(
    stage: str | None, in_scope: Sequence[str], crm_stages: Collection[str]
) -> str | None:
    """Why a webhook that would close a watch (``stage`` out of scope) cannot be trusted, or
    None when both the stage and every filter name are known to the CRM."""
    if not stage:
        return "the webhook names no stage"
    if stage not in crm_stages:
        return f"the webhook's stage {stage!r} is not a CRM stage ({sorted(crm_stages)})"
    return stage_filter_problem(in_scope, crm_stages)


@dataclass(frozen=True)
class Reconciliation:
    """Deals to register (in scope, no open watch) and watches to close (deal left scope)."""

    to_register: tuple[Mapping[str, Any], ...]
    to_close: tuple[str, ...]


def reconcile(
    deals_in_scope: Iterable[Mapping[str, Any]], watched_ids: Collection[str]
) -> Reconciliation:
    """Compare the CRM's in-scope deals with the open watches (by subject id)."""
    deals = list(deals_in_scope)
    in_scope_ids = {str(d["id"]) for d in deals}
    return Reconciliation(
        to_register=tuple(d for d in deals if str(d["id"]) not in watched_ids),
        to_close=tuple(sorted(w for w in watched_ids if w not in in_scope_ids)),
    )
