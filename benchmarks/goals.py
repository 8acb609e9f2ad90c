"""The performance goals of issues 11 and 19 (and issue 2's engine goal), checked against one
run.

Each goal compares this project's median with a peer's median measured in the same run; a goal
whose inputs were not measured (a peer or the engine skipped) is reported as "not measured",
never as met.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.durable_rows import DurableRow
from benchmarks.durable_runtime import INLINE, LATENCY, WORKER
from benchmarks.durable_scaling import ScaleReport
from benchmarks.engine import PLANS_OFF, XSTATE_ACTOR
from benchmarks.timing import Result
from benchmarks.waiting_calls import Row as WaitingRow
from benchmarks.waiting_calls import over

#: Cost at 1,000 states over cost at 10 states (same depth) still counted as flat.
FLAT_SCALING_LIMIT = 1.25


@dataclass(frozen=True)
class Goal:
    """One goal: what was wanted, what was measured, and whether it was met."""

    name: str
    target: str
    measured: str
    met: bool | None  # None: not measured

    @property
    def verdict(self) -> str:
        """``met``, ``shortfall: ...`` or ``not measured``."""
        if self.met is None:
            return "not measured"
        return "met" if self.met else "shortfall"


def _pick(results: Sequence[Result], case: str, prefix: str, suffix: str = "") -> Result | None:
    """The measured row of ``case`` whose subject starts with ``prefix`` and ends with
    ``suffix`` (without one: not a variant row such as "plans off" or XState's actor row)."""
    variants = (PLANS_OFF, XSTATE_ACTOR)
    return next(
        (
            r
            for r in results
            if r.case == case
            and r.subject.startswith(prefix)
            and r.ok
            and (r.subject.endswith(suffix) if suffix else not r.subject.endswith(variants))
        ),
        None,
    )


def _ratio_goal(name: str, ours: Result | None, peer: Result | None, factor: float) -> Goal:
    target = f">= {factor:g}x {peer.subject if peer else 'peer'}"
    if ours is None or peer is None:
        return Goal(name, target, "—", None)
    got = ours.median / peer.median
    measured = f"{got:.2f}x ({ours.median:,.0f} vs {peer.median:,.0f} {ours.unit})"
    return Goal(name, target, measured, got >= factor)


#: Issue 19: through an actor, charts that do work >= 2x XState, action-free ones >= 2.5x;
#: the pure transition() >= 3x XState's actor on the same chart.
ACTOR_GOALS = (
    ("flat", 2.5),
    ("hier", 2.5),
    ("reenter", 2.5),
    ("counter", 2.0),
    ("entry/exit toggle", 2.0),
    ("shop", 2.0),
    ("invoice", 2.0),
)
PURE_VS_ACTOR_GOALS = (
    ("pure flat", 3.0),
    ("pure hier", 3.0),
    ("pure counter", 3.0),
    ("pure entry/exit toggle", 3.0),
    ("pure shop", 3.0),
    ("pure invoice", 3.0),
)
#: Issue 11: the pure transition() against XState's own transition().
PURE_VS_TRANSITION_GOALS = (("pure flat", 10.0), ("pure hier", 10.0), ("pure counter", 10.0))


def engine_goals(results: Sequence[Result]) -> list[Goal]:
    """XState ratios per case, and 2x the fastest Python peer (issue 2)."""
    goals = []
    for case, factor in ACTOR_GOALS:
        goals.append(
            _ratio_goal(
                f"engine {case} vs XState",
                _pick(results, case, "statecharts"),
                _pick(results, case, "xstate"),
                factor,
            )
        )
    for case, factor in PURE_VS_ACTOR_GOALS:
        goals.append(
            _ratio_goal(
                f"engine {case} vs XState's actor",
                _pick(results, case, "statecharts"),
                _pick(results, case, "xstate", XSTATE_ACTOR),
                factor,
            )
        )
    for case, factor in PURE_VS_TRANSITION_GOALS:
        goals.append(
            _ratio_goal(
                f"engine {case} vs XState's transition()",
                _pick(results, case, "statecharts"),
                _pick(results, case, "xstate"),
                factor,
            )
        )
    for case in ("flat", "hier", "reenter"):
        python_peers = [
            r
            for r in results
            if r.case == case and r.ok and not r.subject.startswith(("statecharts", "xstate"))
        ]
        best = max(python_peers, key=lambda r: r.median, default=None)
        goals.append(
            _ratio_goal(
                f"engine {case} vs fastest Python peer",
                _pick(results, case, "statecharts"),
                best,
                2.0,
            )
        )
    return goals


def rehydrate_goals(results: Sequence[Result]) -> list[Goal]:
    """Rehydrate: 10x the best peer."""
    peers = [r for r in results if r.ok and not r.subject.startswith("statecharts")]
    best = max(peers, key=lambda r: r.median, default=None)
    ours = next((r for r in results if r.ok and r.subject.startswith("statecharts")), None)
    return [_ratio_goal("rehydrate vs best Python peer", ours, best, 10.0)]


def scaling_goals(results: Sequence[Result]) -> list[Goal]:
    """Flat cost: 1,000-state chart within FLAT_SCALING_LIMIT of the 10-state one, per depth."""
    goals = []
    subjects = dict.fromkeys(r.subject for r in results)
    for subject in subjects:
        worst: tuple[float, str] | None = None
        for r in results:
            if r.subject != subject or not r.ok or not r.case.startswith("1000 states"):
                continue
            depth = r.case.split("depth ")[1]
            small = next(
                (
                    s
                    for s in results
                    if s.subject == subject and s.ok and s.case == f"10 states, depth {depth}"
                ),
                None,
            )
            if small is None:
                continue
            growth = small.median / r.median  # cost ratio = inverse rate ratio
            if worst is None or growth > worst[0]:
                worst = (growth, f"depth {depth}")
        target = f"cost(1,000 states) <= {FLAT_SCALING_LIMIT}x cost(10 states), each depth"
        if worst is None:
            goals.append(Goal(f"scaling flat ({subject})", target, "—", None))
        else:
            goals.append(
                Goal(
                    f"scaling flat ({subject})",
                    target,
                    f"worst {worst[0]:.2f}x at {worst[1]}",
                    worst[0] <= FLAT_SCALING_LIMIT,
                )
            )
    return goals


def durable_goals(rows: Sequence[DurableRow]) -> list[Goal]:
    """Durable (issue 20, at equal concurrency): workflows/s against DBOS with the same number
    of workflows in flight (this project in the caller, as DBOS), the batched worker on a
    backlog, transactions per workflow, the latency of one step with an idle worker, and
    steps/s against raw one-row commits with each step its own commit (issue 11's 70%)."""

    def find(backend: str, clients: int, subject: str) -> DurableRow | None:
        return next(
            (
                r
                for r in rows
                if r.backend.startswith(backend)
                and r.ok
                and r.clients == clients
                and subject in r.subject
            ),
            None,
        )

    def ratio(
        name: str, ours: DurableRow | None, peer: DurableRow | None, factor: float, what: str
    ) -> Goal:
        target = f">= {factor:g}x DBOS workflows/s, {what}"
        if ours is None or peer is None:
            return Goal(name, target, "—", None)
        got = ours.median / peer.median
        return Goal(
            name,
            target,
            f"{got:.2f}x ({ours.median:,.0f} vs {peer.median:,.0f} workflows/s)",
            got >= factor,
        )

    goals = [
        ratio(
            "durable 1 in flight vs DBOS (PostgreSQL)",
            find("PostgreSQL", 1, INLINE),
            find("PostgreSQL", 1, "DBOS"),
            4.0,
            "1 workflow in flight, each in its caller",
        ),
        ratio(
            "durable 4 in flight vs DBOS (PostgreSQL)",
            find("PostgreSQL", 4, INLINE),
            find("PostgreSQL", 4, "DBOS"),
            4.0,
            "4 client threads, 1 workflow each",
        ),
        ratio(
            "durable 1 in flight vs DBOS (SQLite)",
            find("SQLite", 1, INLINE),
            find("SQLite", 1, "DBOS"),
            4.0,
            "1 workflow in flight, each in its caller",
        ),
        ratio(
            "durable backlog, batched worker vs DBOS (PostgreSQL)",
            find("PostgreSQL", 1, WORKER),
            find("PostgreSQL", 1, "DBOS"),
            8.0,
            "1 worker thread on a backlog vs DBOS's 1 in flight",
        ),
    ]
    inline = find("PostgreSQL", 1, INLINE)
    target = "<= 3 database transactions per 3-step workflow, 1 in flight (pg_stat_database)"
    tx = inline.per_workflow if inline else None
    goals.append(
        Goal(
            "durable transactions per workflow",
            target,
            "—" if tx is None else f"{tx:.2f}",
            None if tx is None else tx <= 3.0,
        )
    )
    latency = find("PostgreSQL", 1, LATENCY)
    target = "one step, send to committed state, idle worker: p50 <= 1 ms, p99 < 3 ms (PostgreSQL)"
    if latency is None or not latency.p99:
        goals.append(Goal("durable step latency", target, "—", None))
    else:
        p99 = statistics.median(latency.p99)
        goals.append(
            Goal(
                "durable step latency",
                target,
                f"p50 {latency.median:.2f} ms, p99 {p99:.2f} ms",
                latency.median <= 1.0 and p99 < 3.0,
            )
        )
    raw = find("PostgreSQL", 1, "raw")
    target = (
        ">= 70% of raw single-row UPDATE commits/s, 1 in flight, each step committed "
        "before the next (PostgreSQL)"
    )
    if inline and raw and tx is not None:
        share = inline.steps / raw.steps
        goals.append(
            Goal(
                "durable steps/s vs raw UPDATE",
                target,
                f"{share:.0%} ({inline.steps:,.0f} steps/s vs {raw.steps:,.0f} "
                f"commits/s; {tx / 3:.2f} commits per step)",
                share >= 0.7,
            )
        )
    else:
        goals.append(Goal("durable steps/s vs raw UPDATE", target, "—", None))
    return goals


def durable_scaling_goals(report: ScaleReport) -> list[Goal]:
    """Durable cost flat from 10k to 1M rows, and no sequential scan of ``workflow_runs``."""
    target = (
        f"cost(1M rows) <= {FLAT_SCALING_LIMIT}x cost(10k rows); "
        "no sequential scan of workflow_runs"
    )
    if len(report.rows) < 2 or not all(r.steps for r in report.rows):
        return [Goal("durable scaling 10k -> 1M rows", target, "—", None)]
    small, large = report.rows[0], report.rows[-1]
    growth = small.steps / large.steps
    seq = sum(r.seq_scans for r in report.rows)
    measured = f"{growth:.2f}x cost; {seq} sequential scans"
    return [
        Goal(
            "durable scaling 10k -> 1M rows",
            target,
            measured,
            growth <= FLAT_SCALING_LIMIT and seq == 0,
        )
    ]


def _floor(row: WaitingRow) -> str:
    """The time the CPU a waiting-calls row used takes alone on this machine's cores."""
    cores = os.cpu_count() or 1
    return f"its CPU alone {row.cpu_floor_s(cores):.2f} s on {cores} cores"


def waiting_calls_goals(rows: Sequence[WaitingRow]) -> list[Goal]:
    """Issue 40: runs each awaiting a 1 s async call in one worker process, against DBOS's
    async workflows on the same server: wall time to all done, and its ratio."""
    ours = next((r for r in rows if ", start," in r.subject), None)
    many = next((r for r in rows if ", start_many," in r.subject), None)
    peer = next((r for r in rows if r.subject.startswith("DBOS")), None)
    if ours is None or peer is None:
        return [Goal("waiting calls, time to all done", "—", "—", None)]
    n = f"{ours.n:,} runs each awaiting a 1 s async call, one worker process"
    ratio = peer.done_s / ours.done_s  # (a lower bound when the peer was stopped unfinished)
    peer_time = f"{peer.done_s:.2f} s" if peer.finished else f"over {peer.done_s:.0f} s"
    started_together = (
        []
        if many is None
        else [
            Goal(
                "waiting calls started by start_many, time to all done",
                f"{n}: under 3 s",
                f"{many.done_s:.2f} s (starting {many.starting_s:.2f} s of it; {_floor(many)})",
                many.done_s < 3.0,
            )
        ]
    )
    return [
        Goal(
            "waiting calls, time to all done",
            f"{n}: under 3 s",
            f"{ours.done_s:.2f} s (starting {ours.starting_s:.2f} s of it; {_floor(ours)})",
            ours.done_s < 3.0,
        ),
        *started_together,
        Goal(
            "waiting calls vs DBOS",
            f"{n}: >= 4x DBOS (time to all done)",
            f"{over(peer, ours)}x ({ours.done_s:.2f} s vs {peer_time})",
            ratio >= 4.0 if ours.finished else None,
        ),
    ]


def markdown(goals: Sequence[Goal]) -> str:
    """The goals table."""
    lines = ["| goal | target | measured | verdict |", "|---|---|---|---|"]
    lines += [f"| {g.name} | {g.target} | {g.measured} | {g.verdict} |" for g in goals]
    return "\n".join(lines) + "\n"
