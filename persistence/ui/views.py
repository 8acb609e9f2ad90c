"""What the operator pages show, assembled from the store: list filters and the runs list, a
run's child states on its diagram, a workflow's versions and states, the named limits, and the
time and text formats of the templates. Plain data, no HTML; the templates and the JSON API
share it (a run's own details: `persistence.web.runs`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from persistence.capacity import split_name
from persistence.search import parse_where
from persistence.stores import RunQuery, RunRecord, Store
from persistence.web.runs import RunDetail
from statecharts import Machine, Snapshot
from statecharts.frozen import text_problem

STATUSES = ("active", "error", "done", "done_partial", "cancelled")
"""Run statuses in the order the pages list them (failures before successes)."""

STUCK = "stuck"
"""The pseudo-status of active runs nobody updated for `stuck_after_ms`."""

HOUR_MS = 3_600_000
AGES: dict[str, tuple[str, int, bool]] = {
    "1h": ("started in the last hour", HOUR_MS, True),
    "24h": ("started in the last 24 hours", 24 * HOUR_MS, True),
    "7d": ("started in the last 7 days", 7 * 24 * HOUR_MS, True),
    "older-1h": ("started over an hour ago", HOUR_MS, False),
    "older-24h": ("started over 24 hours ago", 24 * HOUR_MS, False),
    "older-7d": ("started over 7 days ago", 7 * 24 * HOUR_MS, False),
}
"""Age filter values: (label, milliseconds, True for "newer than")."""

MAX_FILTER_LENGTH = 500
"""Longest filter value the runs list accepts (a state path or key is far shorter)."""
MAX_PAGE = 1_000_000
"""Highest page number the runs list accepts (a query parameter is bounded, never trusted)."""


class FilterError(ValueError):
    """A list filter the pages cannot use; the message names the parameter."""


@dataclass(frozen=True)
class Filters:
    """The runs list's filters as given in the URL (empty string: not set); the routes take
    them as `Depends()`, so FastAPI reads each field from the query string of the same name."""

    workflow: str = ""
    status: str = ""
    state: str = ""
    key: str = ""
    age: str = ""
    where: str = ""
    """Search attributes, `NAME=VALUE` terms separated by commas, all of which must hold."""

    def check(self) -> None:
        """Raise `FilterError` naming the parameter for a value the list cannot use."""
        for name in ("workflow", "status", "state", "key", "age", "where"):
            value = getattr(self, name)
            if len(value) > MAX_FILTER_LENGTH:
                raise FilterError(f"{name}: at most {MAX_FILTER_LENGTH} characters")
            problem = text_problem(value)
            if problem is not None:
                raise FilterError(f"{name}: {problem}")
        if self.status and self.status not in (*STATUSES, STUCK):
            raise FilterError(
                f"status: unknown run status {self.status!r}; expected one of "
                f"{', '.join((*STATUSES, STUCK))}"
            )
        if self.age and self.age not in AGES:
            raise FilterError(f"age: unknown age {self.age!r}; expected one of {', '.join(AGES)}")
        self.search()

    def search(self) -> tuple[tuple[str, str], ...]:
        """`where` as (name, value) pairs; `FilterError` naming a term that is not NAME=VALUE."""
        terms = [term.strip() for term in self.where.split(",") if term.strip()]
        try:
            return parse_where(terms, "where")
        except ValueError as exc:
            raise FilterError(str(exc)) from None

    def query(self, now: int, stuck_after_ms: int, *, with_status: bool = True) -> RunQuery:
        """The store query for these filters (`with_status=False`: all statuses, for counts)."""
        self.check()
        status = self.status if with_status else ""
        created_after = created_before = None
        if self.age:
            _, span, newer = AGES[self.age]
            created_after, created_before = (now - span, None) if newer else (None, now - span)
        return RunQuery(
            workflow_name=self.workflow or None,
            status=(status or None) if status != STUCK else None,
            state=self.state or None,
            key=self.key or None,
            created_after=created_after,
            created_before=created_before,
            stuck_before=now - stuck_after_ms if status == STUCK else None,
            search=self.search(),
        )

    def params(self, **changes: str) -> dict[str, str]:
        """The non-empty filters as URL parameters, with `changes` applied."""
        values = {
            "workflow": self.workflow,
            "status": self.status,
            "state": self.state,
            "key": self.key,
            "age": self.age,
            "where": self.where,
            **changes,
        }
        return {k: v for k, v in values.items() if v}


@dataclass(frozen=True)
class RunList:
    """One page of the runs list with its counts and the runs that need attention."""

    filters: Filters
    runs: list[RunRecord]
    total: int
    counts: dict[str, int]
    stuck: int
    page: int
    page_size: int
    attention_stuck: list[RunRecord] = field(default_factory=list)
    attention_failed: list[RunRecord] = field(default_factory=list)

    @property
    def pages(self) -> int:
        """Number of pages (at least 1)."""
        return max(1, -(-self.total // self.page_size))


def run_list(
    store: Store,
    filters: Filters,
    page: int,
    page_size: int,
    now: int,
    stuck_after_ms: int,
    attention: int = 5,
) -> RunList:
    """The runs list: counts per status (for every status under the other filters), the
    stuck and failed runs first, then the page of runs matching all filters, newest first."""
    page = max(1, page)
    query = filters.query(now, stuck_after_ms)
    everything = filters.query(now, stuck_after_ms, with_status=False)
    counts = store.count_matching(everything)
    stuck_query = dataclasses.replace(filters, status=STUCK)
    stuck = sum(store.count_matching(stuck_query.query(now, stuck_after_ms)).values())
    if filters.status == STUCK:
        total = stuck
    elif filters.status:
        total = counts.get(filters.status, 0)
    else:
        total = sum(counts.values())
    runs = store.search_runs(query, page_size, (page - 1) * page_size)
    attention_stuck: list[RunRecord] = []
    attention_failed: list[RunRecord] = []
    if not filters.status and page == 1:
        if stuck:
            attention_stuck = store.search_runs(stuck_query.query(now, stuck_after_ms), attention)
        if counts.get("error"):
            failed = dataclasses.replace(filters, status="error")
            attention_failed = store.search_runs(failed.query(now, stuck_after_ms), attention)
    return RunList(
        filters, runs, total, counts, stuck, page, page_size, attention_stuck, attention_failed
    )


def is_stuck(run: RunRecord, now: int, stuck_after_ms: int) -> bool:
    """The list's notion of stuck for one run (the same rule the store query applies)."""
    return RunQuery(stuck_before=now - stuck_after_ms).matches(run)


# -- one run ---------------------------------------------------------------------------------


def child_notes(detail: RunDetail, snapshot: Snapshot) -> dict[str, tuple[str, str]]:
    """For each state of the run that invoked an active child run: (the child's workflow and
    state, its page), shown inside that state's box on the run's diagram."""
    notes: dict[str, tuple[str, str]] = {}
    prefix = snapshot.machine.id + "."
    for child in detail.children:
        ref = snapshot.children.get(child.parent_invoke_id or "")
        if ref is None or ref.invoked_by is None or child.terminal:
            continue
        path = (
            ref.invoked_by[len(prefix) :] if ref.invoked_by.startswith(prefix) else ref.invoked_by
        )
        notes[path] = (f"{child.workflow_name}: {child.state}", f"/runs/{child.id}")
    return notes


# -- a workflow ------------------------------------------------------------------------------


@dataclass(frozen=True)
class VersionRow:
    """A definition version in use: its runs per status."""

    version: str
    counts: dict[str, int]
    loaded: bool
    label: str | None

    @property
    def total(self) -> int:
        """Runs of this version."""
        return sum(self.counts.values())


def versions_of(store: Store, workflow: str, loaded: Mapping[str, str | None]) -> list[VersionRow]:
    """Definition versions (fingerprints) that runs of `workflow` use; `loaded` maps the
    fingerprints this UI has definitions for to their version labels."""
    rows: dict[str, dict[str, int]] = {}
    for version, status, n in store.run_groups("workflow_version", workflow):
        rows.setdefault(version, {})[status] = n
    return sorted(
        (VersionRow(v, c, v in loaded, loaded.get(v)) for v, c in rows.items()),
        key=lambda r: (-r.counts.get("active", 0), -r.total, r.version),
    )


def state_counts(store: Store, workflow: str) -> dict[str, dict[str, int]]:
    """Runs per active leaf path, per status (a parallel run counts in each of its leaves)."""
    counts: dict[str, dict[str, int]] = {}
    for state, status, n in store.run_groups("state", workflow):
        for leaf in state.split(","):
            if leaf:
                per_status = counts.setdefault(leaf, {})
                per_status[status] = per_status.get(status, 0) + n
    return counts


def workflow_counts(store: Store) -> dict[str, dict[str, int]]:
    """Runs per workflow name, per status."""
    counts: dict[str, dict[str, int]] = {}
    for name, status, n in store.run_groups("workflow_name"):
        counts.setdefault(name, {})[status] = n
    return counts


# -- formatting ------------------------------------------------------------------------------


def iso_time(ms: int | None) -> str:
    """Epoch milliseconds as "2026-11-30 00:44:12 UTC" ("" for None)."""
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def relative_time(ms: int | None, now: int) -> str:
    """ "3 min ago" / "in 20 s" for `ms` seen at `now`."""
    if ms is None:
        return ""
    delta = (ms - now) // 1000
    amount = abs(delta)
    if amount < 60:
        text = f"{amount} s"
    elif amount < 3600:
        text = f"{amount // 60} min"
    elif amount < 86400:
        text = f"{amount // 3600} h {amount % 3600 // 60} min"
    else:
        text = f"{amount // 86400} d {amount % 86400 // 3600} h"
    return f"in {text}" if delta > 0 else f"{text} ago"


def short_version(version: str) -> str:
    """The first 12 characters of a definition fingerprint."""
    return version[:12]


def event_type(event: Mapping[str, Any]) -> str:
    """An event's type ("" if it has none)."""
    return str(event.get("type", ""))


def event_payload(event: Mapping[str, Any]) -> dict[str, Any]:
    """An event's fields other than its type."""
    return {k: v for k, v in event.items() if k != "type"}


def leaves(state: str) -> Sequence[str]:
    """The active leaf paths of a `state` column."""
    return [leaf for leaf in state.split(",") if leaf]


# -- named limits ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LimitRow:
    """One named limit on the limits page (a per-key limit: one row per key in use)."""

    name: str  # as stored: the limit, or `<limit>[<key>]` for a key's share of it
    sites: list[str]  # "workflow: state path" of every loaded call site naming the limit
    in_flight: int
    waiting: list[tuple[str, int]]  # (reason, runs)
    paused_until: int | None
    limit: str = ""  # the limit's name (without the key)
    key: str | None = None  # the key of a per-key limit's share


def limit_rows(store: Store, machines: Sequence[Machine], now: int) -> list[LimitRow]:
    """The limits the store knows and the loaded call sites name, with their use now; a
    per-key limit's keys each on a row of their own, after their limit."""
    sites: dict[str, list[str]] = {}
    for machine in machines:
        for node in machine.definition.nodes:
            for invoke in node.invoke:
                if invoke.limit:
                    sites.setdefault(invoke.limit, []).append(f"{machine.id}: {node.id}")
    usage = {u.name: u for u in store.capacity_usage(now)}
    rows = []
    for name in sorted(set(sites) | set(usage), key=lambda n: (split_name(n)[0], n)):
        limit, key = split_name(name)
        used = usage.get(name)
        rows.append(
            LimitRow(
                name,
                sorted(set(sites.get(limit, []))),
                used.in_flight if used else 0,
                sorted(used.waiting.items()) if used else [],
                used.paused_until if used else None,
                limit,
                key,
            )
        )
    return rows
