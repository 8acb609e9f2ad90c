"""Evaluate (hourly, weekdays): one run at a time; reconcile with the CRM; create the tasks
that are due; tell sales; release the claim. Config: ``evaluate.json``.

Failure classes: the database fails the run (no retry: the next run would act on a false
picture); the CRM or the task tool skip that item (retried first) and the run ends partial;
mail fails the run, which starts the Alerts workflow. A mail failure, a stage filter that
matches nothing or the scope health rule (``checking_scope_health``: open deals in the CRM but
none in scope for a business day, or in scope dropping to zero) first releases the claim
(``releasing_after_failure``), then fails the run; a database failure is released by Alerts.
A claim held by another run for longer than the schedule's hour fails the run
(``ClaimHeldTooLong``) so it is alerted instead of ending quietly ``overlapping``.
Dry-run blocks task creation and e-mail only: the database is written as usual, with
``dry-run`` in place of a task id (the durable runtime's own dry-run of ``external`` invokes
returns the same).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Any

from machines.config import load_config
from machines.followup import batch, repository
from machines.followup.adapters import CrmUnavailable
from machines.followup.routing import (
    CLOSING_STAGES,
    NothingInScope,
    StageFilterMatchesNothing,
    reconcile,
    scope_health_problem,
    stage_filter_problem,
)
from machines.followup.services import Services
from statecharts import Machine, assign, create_machine, from_callable
from statecharts.frozen import thaw

CONFIG = Path(__file__).with_name("evaluate.json")
WORKFLOW = "followup_evaluate"


def task_key(item: Mapping[str, Any]) -> str:
    """The task tool key of a step: the same step always finds the same task."""
    return (
        f"followup:{item['subject_type']}:{item['subject_id']}:watch-{item['watch_id']}"
        f":step-{item['step']}"
    )


def task_text(item: Mapping[str, Any]) -> tuple[str, str]:
    """Title and body of a follow-up task (with the deal's summary when Enrich wrote one)."""
    title = f"Follow up: {item['subject_name']} (step {item['step']} of {item['steps']})"
    body = f"Follow-up step {item['step']} for {item['subject_name']}, due {item['due_on']}."
    if item.get("summary"):
        body += "\n\nRecent e-mails:\n" + str(item["summary"])
    return title, body


def notification_text(created: list[Mapping[str, Any]], today: str) -> tuple[str, str]:
    """Subject and body of the mail telling sales which tasks were created."""
    lines = [f"- {c['subject_name']}: step {c['step']} (task {c['task_id']})" for c in created]
    return f"{len(created)} follow-up task(s) created on {today}", "\n".join(lines)


def fail_run(input: dict[str, Any]) -> None:
    """Raise the failure recorded in ``input["failure"]`` again, under its own name, so the run
    fails with the error that caused it (after the claim was released)."""
    failure = input["failure"] or {}
    name = str(failure.get("name", "WorkflowFailure"))
    kind = type(name if name.isidentifier() else "WorkflowFailure", (WorkflowFailure,), {})
    raise kind(str(failure.get("message", "")))


class WorkflowFailure(Exception):
    """Base of the errors ``fail_run`` raises again."""


def build(services: Services) -> Machine:
    """The Evaluate machine wired to ``services``."""
    db = services.db

    def claim_run(input: dict[str, Any]) -> dict[str, Any]:
        now = int(input["now"])
        with db.transaction() as tx:
            claim = repository.claim_run(
                tx, WORKFLOW, str(input["run_key"]), now, services.settings.claim_stale_after_ms
            )
        holder = claim["holder"]
        claim["held_ms"] = now - int(holder["started_at"]) if holder else 0
        return claim

    def fetch_deals(input: Any) -> dict[str, Any]:
        stages = services.crm.stage_names()
        deals = services.crm.deals_in_stages(list(services.settings.in_scope_stages))
        open_deals = services.crm.count_deals_in_stages(
            [s for s in stages if s not in CLOSING_STAGES]
        )
        return {"stages": stages, "deals": deals, "open_deals": open_deals}

    def check_scope_health(input: dict[str, Any]) -> bool:
        scope = input["scope"]
        with db.transaction() as tx:
            history = repository.scope_history(tx, WORKFLOW)
            days_off = repository.holidays(tx)
        problem = scope_health_problem(
            history,
            int(scope["in_scope"]),
            int(scope["open_deals"]),
            date.fromisoformat(input["today"]),
            days_off,
        )
        if problem is not None:
            raise NothingInScope(problem)
        return True

    def check_stage_filter(input: dict[str, Any]) -> bool:
        problem = stage_filter_problem(services.settings.in_scope_stages, input["crm"]["stages"])
        if problem is not None:
            raise StageFilterMatchesNothing(problem)
        return True

    def reconcile_watches(input: dict[str, Any]) -> dict[str, Any]:
        today, now = date.fromisoformat(input["today"]), int(input["now"])
        with db.transaction() as tx:
            watched = repository.open_subject_ids(tx, services.settings.subject_type)
            done = repository.exhausted_subject_ids(tx, services.settings.subject_type)
        plan = reconcile([d for d in input["crm"]["deals"] if str(d["id"]) not in done], watched)
        reasons = {subject_id: gone_or_left(subject_id) for subject_id in plan.to_close}
        with db.transaction() as tx:
            registered = []
            for deal in plan.to_register:
                _, created = repository.register_watch(
                    tx,
                    services.settings.subject_type,
                    str(deal["id"]),
                    str(deal["name"]),
                    services.settings.cadence,
                    today,
                    now,
                )
                if created:
                    registered.append(str(deal["name"]))
            closed = []
            for subject_id, reason in reasons.items():
                if reason is not None and repository.close_watch(
                    tx, services.settings.subject_type, subject_id, reason, now
                ):
                    closed.append(subject_id)
        return {"registered": registered, "closed": closed}

    def gone_or_left(subject_id: str) -> str | None:
        """Why a watched deal is no longer in scope: ``subject_gone`` if the CRM deleted it,
        else ``left scope``; None if the CRM cannot say now (the next run closes it)."""
        try:
            return "left scope" if services.crm.get_deal(subject_id) else "subject_gone"
        except CrmUnavailable:
            return None

    def plan_steps(input: dict[str, Any]) -> list[dict[str, Any]]:
        with db.transaction() as tx:
            return repository.due_steps(tx, date.fromisoformat(input["today"]))

    def ensure_task(input: dict[str, Any]) -> str:
        item = input["current"]
        if input["dry_run"]:
            return repository.DRY_RUN_TASK
        key = task_key(item)
        existing = services.tasks.find_task(key)
        if existing is not None:
            return existing
        title, body = task_text(item)
        return services.tasks.create_task(key, title, body, str(item["due_on"]))

    def record_step(input: dict[str, Any]) -> dict[str, bool]:
        item = input["current"]
        with db.transaction() as tx:
            return repository.mark_step_fired(
                tx,
                int(item["watch_id"]),
                int(item["step"]),
                str(input["task_id"]),
                date.fromisoformat(input["today"]),
                int(input["now"]),
            )

    def send_notification(input: dict[str, Any]) -> str:
        if input["dry_run"]:
            return repository.DRY_RUN_TASK
        subject, body = notification_text(input["created"], input["today"])
        return services.mail.send(
            services.settings.sales_inbox, subject, body, key=f"{WORKFLOW}:{input['run_key']}"
        )

    def release_failed_run(input: dict[str, Any]) -> bool:
        with db.transaction() as tx:
            repository.finish_run(
                tx,
                WORKFLOW,
                str(input["run_key"]),
                "failed",
                {"error": input["failure"], "scope": input["scope"]},
                int(input["now"]),
            )
        return True

    def finish_run(input: dict[str, Any]) -> str:
        status = "partial" if input["skipped"] else "ok"
        detail = {
            "created": len(input["created"]),
            "skipped": input["skipped"],
            "reconciled": input["reconciled"],
            "scope": input["scope"],
            "exhausted": input["exhausted"],
            "abandoned": input["abandoned"],
        }
        with db.transaction() as tx:
            repository.finish_run(
                tx, WORKFLOW, str(input["run_key"]), status, detail, int(input["now"])
            )
        return status

    def remember_deals(context: Mapping[str, Any], event: Mapping[str, Any]) -> dict[str, Any]:
        if batch.failed(event):
            return {"crm": None, "skipped": batch.skip_record(context, event, "reconciliation")}
        crm = event["output"]
        return {
            "crm": crm,
            "scope": {
                "today": context["today"],
                "in_scope": len(crm["deals"]),
                "open_deals": crm["open_deals"],
            },
        }

    def note_task(context: Mapping[str, Any], event: Mapping[str, Any]) -> dict[str, Any]:
        if batch.failed(event):
            item = context["current"]
            return {
                "task_id": None,
                "skipped": batch.skip_record(
                    context, event, f"{item['subject_name']} step {item['step']}"
                ),
            }
        return {"task_id": event["output"]}

    def note_created(context: Mapping[str, Any], event: Mapping[str, Any]) -> dict[str, Any]:
        item = context["current"]
        exhausted = [*thaw(context["exhausted"])]
        if event["output"]["exhausted"]:
            exhausted.append(item["subject_name"])
        return {
            "created": [
                *thaw(context["created"]),
                {
                    "subject_name": item["subject_name"],
                    "step": item["step"],
                    "due_on": item["due_on"],
                    "task_id": context["task_id"],
                },
            ],
            "exhausted": exhausted,
        }

    def remember_blocked_claim(
        context: Mapping[str, Any], event: Mapping[str, Any]
    ) -> dict[str, Any]:
        holder, hours = event["output"]["holder"], int(event["output"]["held_ms"]) / 3_600_000
        return {
            "failure": {
                "name": "ClaimHeldTooLong",
                "message": (
                    f"run {holder['run_key']} has held the {WORKFLOW} "
                    f"claim for {hours:.1f} h, past "
                    "the hourly schedule: later runs do nothing until it is released or goes stale"
                ),
            }
        }

    return create_machine(
        load_config(CONFIG),
        guards={
            **batch.GUARDS,
            "claimGranted": lambda c, e: bool(e["output"]["granted"]),
            "claimHeldTooLong": lambda c, e: (
                int(e["output"]["held_ms"]) > services.settings.claim_alert_after_ms
            ),
            "crmAnswered": lambda c, e: c["crm"] is not None,
            "taskReady": lambda c, e: c["task_id"] is not None,
            "createdSome": lambda c, e: len(c["created"]) > 0,
        },
        actions={
            **batch.ACTIONS,
            "rememberDeals": assign(remember_deals),
            "rememberReconciled": assign(lambda c, e: {"reconciled": e["output"]}),
            "noteTask": assign(note_task),
            "noteCreated": assign(note_created),
            "rememberFailure": assign(lambda c, e: {"failure": thaw(e.get("error"))}),
            "rememberBlockedClaim": assign(remember_blocked_claim),
            "rememberAbandoned": assign(lambda c, e: {"abandoned": thaw(e["output"]["abandoned"])}),
        },
        actors={
            name: from_callable(fn, name)
            for name, fn in {
                "claimRun": claim_run,
                "fetchDeals": fetch_deals,
                "checkStageFilter": check_stage_filter,
                "checkScopeHealth": check_scope_health,
                "reconcileWatches": reconcile_watches,
                "planSteps": plan_steps,
                "ensureTask": ensure_task,
                "recordStep": record_step,
                "sendNotification": send_notification,
                "finishRun": finish_run,
                "releaseFailedRun": release_failed_run,
                "failRun": fail_run,
            }.items()
        },
    )
