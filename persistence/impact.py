"""What deploying a new definition does to the runs in flight: the impact half of
``statecharts diff OLD NEW --store URL``.

Every active run of the workflow that is not already on the new definition is tried against
it exactly as a worker would: ``new.restore(snapshot)``, which applies the new definition's
migration from the run's version label. A run the new definition restores is **migrated**
(the report says where it lands). A run it cannot restore is:

- **stranded** when it sits in a state the change removes: the new definition has no place
  for it and no migration moves it (keeping the old definition loaded only postpones that);
- **pinned** otherwise: it goes on with its old definition, which must stay in the workers'
  machines until such runs finish (``statecharts runs versions`` lists them).

Runs are grouped by the removed or changed state they are in (the outermost removed state,
else the nearest changed one), so a reviewer sees "3 runs in waiting_for_approval (removed):
stranded".
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field

from persistence.columns import state_text
from persistence.stores import RunQuery, RunRecord, Store
from statecharts.diff.changes import MachineDiff

MIGRATED, STRANDED, PINNED = "migrated", "stranded", "pinned"
REMOVED_STATE, CHANGED_STATE, UNCHANGED_STATE = "removed", "changed", "unchanged"
_PAGE = 500
_LONGEST_REASON = 200


@dataclass
class StateImpact:
    """The active runs in one removed or changed state (or in all unchanged ones)."""

    state: str
    change: str  # REMOVED_STATE, CHANGED_STATE or UNCHANGED_STATE
    runs: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)  # MIGRATED/STRANDED/PINNED -> runs
    landed: dict[str, int] = field(default_factory=dict)  # migrated runs by their new state
    reasons: dict[str, int] = field(default_factory=dict)  # why runs could not be migrated
    examples: list[str] = field(default_factory=list)  # a few stranded run ids

    @property
    def stranded(self) -> int:
        """Runs that the new definition leaves with nowhere to go."""
        return self.outcomes.get(STRANDED, 0)


@dataclass(frozen=True)
class Impact:
    """The impact report for one workflow in one store."""

    workflow: str
    store: str
    active: int  # active runs of the workflow
    on_new: int  # of which already on the new definition
    states: tuple[StateImpact, ...]

    @property
    def stranded(self) -> int:
        """Runs a deployment of the new definition would strand."""
        return sum(s.stranded for s in self.states)

    @property
    def pinned(self) -> int:
        """Runs that need the old definition kept beside the new one until they finish."""
        return sum(s.outcomes.get(PINNED, 0) for s in self.states)


def store_impact(store: Store, diff: MachineDiff) -> Impact:
    """Try every active run of ``diff.old``'s workflow against ``diff.new``, grouped by the
    removed or changed state it is in."""
    new = diff.new
    groups: dict[str, StateImpact] = {}
    active = on_new = 0
    for run in _active_runs(store, diff.old.id):
        active += 1
        if run.workflow_version == new.fingerprint:
            on_new += 1
            continue
        state, change = _affected_state(diff, run.state)
        group = groups.setdefault(state, StateImpact(state, change))
        group.runs += 1
        try:
            landed = state_text(new.restore(run.snapshot))
        except Exception as exc:  # a migration is user code: whatever it raises, no run moves
            outcome = STRANDED if change == REMOVED_STATE else PINNED
            reason = _reason(exc)
            group.reasons[reason] = group.reasons.get(reason, 0) + 1
            if outcome == STRANDED and len(group.examples) < 3:
                group.examples.append(run.id)
        else:
            outcome = MIGRATED
            group.landed[landed] = group.landed.get(landed, 0) + 1
        group.outcomes[outcome] = group.outcomes.get(outcome, 0) + 1
    order = {REMOVED_STATE: 0, CHANGED_STATE: 1, UNCHANGED_STATE: 2}
    states = sorted(groups.values(), key=lambda g: (order[g.change], g.state))
    return Impact(diff.old.id, store.url, active, on_new, tuple(states))


def _reason(exc: Exception) -> str:
    """The error as one line of at most ``_LONGEST_REASON`` characters, cut between words."""
    return textwrap.shorten(str(exc) or type(exc).__name__, _LONGEST_REASON, placeholder=" …")


def _active_runs(store: Store, workflow: str) -> Iterator[RunRecord]:
    query = RunQuery(workflow_name=workflow, status="active")
    offset = 0
    while True:
        page = store.search_runs(query, limit=_PAGE, offset=offset)
        yield from page
        if len(page) < _PAGE:
            return
        offset += _PAGE


def _affected_state(diff: MachineDiff, state_column: str) -> tuple[str, str]:
    """The state a run is counted under: the outermost removed state holding one of its
    active leaves, else the nearest changed one, else "(unchanged states)"."""
    removed = set(diff.removed_states())
    changed = diff.changed_states
    nearest_changed = None
    for leaf in state_column.split(","):
        parts = leaf.split(".")
        prefixes = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
        for prefix in prefixes:
            if prefix in removed:
                return prefix, REMOVED_STATE
        for prefix in reversed(prefixes):
            if prefix in changed and nearest_changed is None:
                nearest_changed = prefix
    if nearest_changed is not None:
        return nearest_changed, CHANGED_STATE
    return "(unchanged states)", UNCHANGED_STATE


def impact_text(impact: Impact) -> str:
    """The report for a terminal or CI log."""
    lines = [
        f"Active runs of {impact.workflow} in {impact.store}: {impact.active} "
        f"({impact.on_new} already on the new definition)"
    ]
    for group in impact.states:
        lines.append(
            f"  {group.state} ({group.change}): {group.runs} run(s): "
            + ", ".join(f"{n} {o}" for o, n in sorted(group.outcomes.items()))
        )
        lines += [f"      migrated to {where}: {n}" for where, n in sorted(group.landed.items())]
        lines += [f"      not migrated ({n}): {why}" for why, n in sorted(group.reasons.items())]
        if group.examples:
            lines.append(f"      e.g. {', '.join(group.examples)}")
    lines.append(_verdict(impact))
    return "\n".join(lines) + "\n"


def impact_markdown(impact: Impact) -> str:
    """The report for a pull-request comment."""
    out = [
        f"#### Active runs of `{impact.workflow}`",
        "",
        f"{impact.active} active, {impact.on_new} already on the new definition.",
        "",
    ]
    if impact.states:
        out += [
            "| State | Change | Runs | Migrated | Stranded | Pinned to the old definition |",
            "|---|---|---|---|---|---|",
        ]
        out += [
            f"| `{g.state}` | {g.change} | {g.runs} | {g.outcomes.get(MIGRATED, 0)} | "
            f"{g.stranded} | {g.outcomes.get(PINNED, 0)} |"
            for g in impact.states
        ]
        out.append("")
    out += [_verdict(impact), ""]
    return "\n".join(out)


def _verdict(impact: Impact) -> str:
    if impact.stranded:
        return (
            f"STRANDED: {impact.stranded} run(s) sit in removed states and the new "
            "definition has no migration that moves them (give it version= and "
            "migrations=, or let them finish first)."
        )
    if impact.pinned:
        return (
            f"No run is stranded; {impact.pinned} run(s) have no migration and go on "
            "with the old definition: keep it in the workers' machines until they finish."
        )
    return "No run is stranded."
