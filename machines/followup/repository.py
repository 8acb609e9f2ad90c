"""Every read and write the follow-up workflows make to their database, parameterized.

Functions take a ``Transaction`` so each workflow step decides what commits together.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import date
from typing import Any

from machines.followup.business_days import cadence_due_dates
from machines.followup.db import Transaction

DRY_RUN_TASK = "dry-run"


def holidays(tx: Transaction) -> set[date]:
    """The holidays table as dates."""
    return {date.fromisoformat(str(r["day"])) for r in tx.rows("select day from holidays")}


def add_holiday(tx: Transaction, day: date, name: str) -> None:
    """Add (or rename) a holiday."""
    tx.execute(
        "insert into holidays (day, name) values (?, ?) on conflict (day) do update "
        "set name = excluded.name",
        (day.isoformat(), name),
    )


def cadence_offsets(tx: Transaction, name: str) -> list[int]:
    """The business-day offsets of cadence ``name``."""
    row = tx.one("select offsets from cadences where name = ?", (name,))
    if row is None:
        raise LookupError(f"no cadence named {name!r} in the cadences table")
    offsets = row["offsets"]
    values = json.loads(offsets) if isinstance(offsets, str) else offsets
    return [int(v) for v in values]


# -- watches -----------------------------------------------------------------------------------


def register_watch(
    tx: Transaction,
    subject_type: str,
    subject_id: str,
    subject_name: str,
    cadence: str,
    opened_on: date,
    now: int,
) -> tuple[int, bool]:
    """Open a watch with its steps scheduled, unless the subject has an open one already
    (``on conflict do nothing``: its cadence keeps running). Returns (watch id, created)."""
    row = tx.one(
        "insert into watches (subject_type, subject_id, subject_name, cadence, "
        "status, opened_on, opened_at) values (?, ?, ?, ?, 'open', ?, ?) "
        "on conflict do nothing returning id",
        (subject_type, subject_id, subject_name, cadence, opened_on.isoformat(), now),
    )
    if row is None:
        existing = tx.one(
            "select id from watches where subject_type = ? and subject_id = ? and status = 'open'",
            (subject_type, subject_id),
        )
        if existing is None:
            raise LookupError(f"watch for {subject_type} {subject_id} conflicted but is not open")
        return int(existing["id"]), False
    watch_id = int(row["id"])
    dues = cadence_due_dates(opened_on, cadence_offsets(tx, cadence), holidays(tx))
    for step, due_on in enumerate(dues, 1):
        tx.execute(
            "insert into watch_steps (watch_id, step, due_on) values (?, ?, ?)",
            (watch_id, step, due_on.isoformat()),
        )
    return watch_id, True


def close_watch(tx: Transaction, subject_type: str, subject_id: str, reason: str, now: int) -> bool:
    """Close the subject's open watch; its pending steps are skipped. False if none was open."""
    row = tx.one(
        "update watches set status = 'closed', closed_reason = ?, closed_at = ? "
        "where subject_type = ? and subject_id = ? and status = 'open' returning id",
        (reason, now, subject_type, subject_id),
    )
    if row is None:
        return False
    tx.execute(
        "update watch_steps set status = 'skipped' where watch_id = ? and status = 'pending'",
        (row["id"],),
    )
    return True


def open_subject_ids(tx: Transaction, subject_type: str) -> set[str]:
    """Subjects with an open watch."""
    return {
        str(r["subject_id"])
        for r in tx.rows(
            "select subject_id from watches where subject_type = ? and status = 'open'",
            (subject_type,),
        )
    }


def exhausted_subject_ids(tx: Transaction, subject_type: str) -> set[str]:
    """Subjects whose latest watch ran its whole cadence: reconciliation leaves them be (a
    webhook that brings the deal back into scope opens a new watch)."""
    return {
        str(r["subject_id"])
        for r in tx.rows(
            "select w.subject_id from watches w where w.subject_type = ? and w.closed_reason = "
            "'exhausted' and w.id = (select max(v.id) from watches v where v.subject_type = "
            "w.subject_type and v.subject_id = w.subject_id)",
            (subject_type,),
        )
    }


def open_watches(tx: Transaction) -> list[dict[str, Any]]:
    """Every open watch (id, subject, summary)."""
    return tx.rows(
        "select id, subject_type, subject_id, subject_name, summary from watches "
        "where status = 'open' order by id"
    )


def store_summary(tx: Transaction, watch_id: int, summary: str, now: int) -> bool:
    """Keep an open watch's latest two-line summary; False if the watch closed meanwhile."""
    return (
        tx.execute(
            "update watches set summary = ?, summarized_at = ? where id = ? and status = 'open'",
            (summary, now, watch_id),
        )
        == 1
    )


def watch_is_open(tx: Transaction, watch_id: int) -> bool:
    """Whether the watch is still open (Enrich asks before it pays the summarizer)."""
    return (
        tx.one("select 1 as x from watches where id = ? and status = 'open'", (watch_id,))
        is not None
    )


# -- steps -------------------------------------------------------------------------------------

_STEP_COLUMNS = (
    "select s.watch_id, s.step, s.due_on, s.status, s.task_id, s.fired_on, "
    "w.subject_type, w.subject_id, w.subject_name, w.summary, "
    "(select count(*) from watch_steps t where t.watch_id = s.watch_id) as steps "
    "from watch_steps s join watches w on w.id = s.watch_id "
)


def due_steps(tx: Transaction, today: date) -> list[dict[str, Any]]:
    """Pending steps of open watches due on or before ``today``, oldest first."""
    return tx.rows(
        _STEP_COLUMNS + "where s.status = 'pending' and w.status = 'open' and "
        "s.due_on <= ? order by s.due_on, s.watch_id, s.step",
        (today.isoformat(),),
    )


def steps_fired_between(tx: Transaction, first: date, last: date) -> list[dict[str, Any]]:
    """Steps whose task was created between ``first`` and ``last`` (inclusive)."""
    return tx.rows(
        _STEP_COLUMNS + "where s.status = 'fired' and s.fired_on >= ? and "
        "s.fired_on <= ? order by s.fired_on, s.watch_id",
        (first.isoformat(), last.isoformat()),
    )


def steps_due_between(tx: Transaction, first: date, last: date) -> list[dict[str, Any]]:
    """Pending steps of open watches due between ``first`` and ``last``."""
    return tx.rows(
        _STEP_COLUMNS + "where s.status = 'pending' and w.status = 'open' and "
        "s.due_on >= ? and s.due_on <= ? order by s.due_on, s.watch_id",
        (first.isoformat(), last.isoformat()),
    )


def watches_opened_between(tx: Transaction, first: date, last: date) -> list[dict[str, Any]]:
    """Watches opened in the period."""
    return tx.rows(
        "select subject_name from watches where opened_on >= ? and opened_on <= ? order by id",
        (first.isoformat(), last.isoformat()),
    )


def watches_closed_between(tx: Transaction, start: int, end: int) -> list[dict[str, Any]]:
    """Watches closed between two instants (epoch ms, end exclusive)."""
    return tx.rows(
        "select subject_name, closed_reason from watches where status = 'closed' "
        "and closed_at >= ? and closed_at < ? order by id",
        (start, end),
    )


def mark_step_fired(
    tx: Transaction, watch_id: int, step: int, task_id: str, today: date, now: int
) -> dict[str, bool]:
    """Record the task made for a step; after the last step the watch closes ``exhausted``.
    Only a pending step changes, so doing it again (a retried step after a crash) changes
    nothing. Returns ``{"fired", "exhausted"}``."""
    fired = (
        tx.execute(
            "update watch_steps set status = 'fired', task_id = ?, fired_on = ?, "
            "fired_at = ? where watch_id = ? and step = ? and status = 'pending'",
            (task_id, today.isoformat(), now, watch_id, step),
        )
        == 1
    )
    exhausted = (
        fired
        and tx.one(
            "select 1 as x from watch_steps where watch_id = ? and status = 'pending'", (watch_id,)
        )
        is None
    )
    if exhausted:
        tx.execute(
            "update watches set status = 'closed', closed_reason = 'exhausted', "
            "closed_at = ? where id = ? and status = 'open'",
            (now, watch_id),
        )
    return {"fired": fired, "exhausted": exhausted}


# -- runs: the one-at-a-time claim and the failure log -----------------------------------------


def claim_run(
    tx: Transaction, workflow: str, run_key: str, now: int, stale_after_ms: int
) -> dict[str, Any]:
    """Claim the right to run ``workflow`` now.

    Returns ``{"granted", "holder", "abandoned"}``: whether this run holds the claim; if not,
    the claim that blocks it (``run_key``, ``started_at``); and the keys of claims taken over
    as ``abandoned`` (older than ``stale_after_ms``: their run died without releasing them).
    Claiming again with the same ``run_key`` is recognised (a step retried after a crash).
    """
    abandoned = [
        str(r["run_key"])
        for r in tx.rows(
            "update run_log set status = 'abandoned', finished_at = ? where workflow = ? and "
            "status = 'running' and started_at < ? and run_key <> ? returning run_key",
            (now, workflow, now - stale_after_ms, run_key),
        )
    ]
    tx.execute(
        "insert into run_log (workflow, run_key, status, started_at) values "
        "(?, ?, 'running', ?) on conflict do nothing",
        (workflow, run_key, now),
    )
    mine = tx.one(
        "select status from run_log where workflow = ? and run_key = ?", (workflow, run_key)
    )
    granted = mine is not None and mine["status"] == "running"
    holder = (
        None
        if granted
        else tx.one(
            "select run_key, started_at from run_log where workflow = ? and status = 'running'",
            (workflow,),
        )
    )
    return {"granted": granted, "holder": holder, "abandoned": abandoned}


def record_run(
    tx: Transaction, workflow: str, run_key: str, status: str, detail: Mapping[str, Any], now: int
) -> None:
    """Log a finished run of a workflow that takes no claim (doing it again updates it)."""
    tx.execute(
        "insert into run_log (workflow, run_key, status, started_at, finished_at, "
        "detail) values (?, ?, ?, ?, ?, ?) on conflict (workflow, run_key) do update "
        "set status = excluded.status, finished_at = excluded.finished_at, "
        "detail = excluded.detail",
        (workflow, run_key, status, now, now, json.dumps(dict(detail), sort_keys=True)),
    )


def scope_history(tx: Transaction, workflow: str, page: int = 500) -> list[dict[str, Any]]:
    """The health rule's history: ``{"started_at", "today", "in_scope", "open_deals"}`` of the
    runs that counted the CRM's deals (their run_log detail), oldest first, going back to the
    latest run that found deals in scope (all of them if none did)."""
    found: list[dict[str, Any]] = []
    offset = 0
    while True:
        rows = tx.rows(
            "select started_at, detail from run_log where workflow = ? and detail "
            "is not null order by started_at desc, id desc limit ? offset ?",
            (workflow, page, offset),
        )
        for row in rows:
            try:
                detail = json.loads(str(row["detail"]))
            except ValueError:
                continue  # a failure's text, not a count
            scope = detail.get("scope") if isinstance(detail, dict) else None
            if isinstance(scope, dict):
                found.append({"started_at": int(row["started_at"]), **scope})
                if int(scope.get("in_scope") or 0) > 0:
                    return found[::-1]
        if len(rows) < page:
            return found[::-1]
        offset += page


def finish_run(
    tx: Transaction, workflow: str, run_key: str, status: str, detail: Mapping[str, Any], now: int
) -> None:
    """Release the claim with the run's outcome (``ok`` or ``partial``)."""
    tx.execute(
        "update run_log set status = ?, finished_at = ?, detail = ? where "
        "workflow = ? and run_key = ? and status = 'running'",
        (status, now, json.dumps(dict(detail), sort_keys=True), workflow, run_key),
    )


def log_failure(
    tx: Transaction, workflow: str, run_key: str, error: str, alert_key: str, now: int
) -> None:
    """Record a failed run (releasing its claim if it held one). A detail the run wrote when it
    released its claim itself (its error and scope counts) is kept."""
    tx.execute(
        "insert into run_log (workflow, run_key, status, started_at, finished_at, "
        "detail, alert_key) values (?, ?, 'failed', ?, ?, ?, ?) on conflict "
        "(workflow, run_key) do update set status = 'failed', finished_at = "
        "coalesce(run_log.finished_at, excluded.finished_at), detail = "
        "coalesce(run_log.detail, excluded.detail), alert_key = excluded.alert_key",
        (workflow, run_key, now, now, error, alert_key),
    )


def recently_alerted(tx: Transaction, alert_key: str, since: int) -> bool:
    """Whether an alert with ``alert_key`` went out at or after ``since``."""
    return (
        tx.one(
            "select 1 as x from run_log where alert_key = ? and alerted_at >= ?", (alert_key, since)
        )
        is not None
    )


def mark_alerted(tx: Transaction, workflow: str, run_key: str, now: int) -> None:
    """Note that the failure of this run was alerted."""
    tx.execute(
        "update run_log set alerted_at = ? where workflow = ? and run_key = ?",
        (now, workflow, run_key),
    )


def run_log(tx: Transaction, workflow: str | None = None) -> list[dict[str, Any]]:
    """The run log, oldest first."""
    if workflow is None:
        return tx.rows("select * from run_log order by id")
    return tx.rows("select * from run_log where workflow = ? order by id", (workflow,))


def step_counts(tx: Transaction) -> Mapping[str, int]:
    """Steps by status (for summaries)."""
    return {
        str(r["status"]): int(r["n"])
        for r in tx.rows("select status, count(*) as n from watch_steps group by status")
    }
