"""Issue 9's rules for the follow-up machine, each shown on real SQLite files with the five
machines running on the in-memory actor: running twice equals running once; one run at a time;
a lost webhook repaired by reconciliation; database failure fatal versus third-party failure
skippable; dry-run blocks only external writes; a stage filter that matches nothing is loud."""

from __future__ import annotations

import threading
from datetime import date, timedelta
from typing import Any

import pytest

from machines.fakes import FOREVER, FakeWorld
from machines.followup import repository
from machines.followup.adapters import FakeTaskTool
from machines.followup.db import Database
from machines.followup.services import Services
from machines.mail import FakeMailer
from machines.runs import Outcome
from tests.machines.conftest import MONDAY, NewRunner, Runner, epoch_ms, make_services

NEXT_MONDAY = MONDAY + timedelta(days=7)


def register(runner: Runner, deal_id: str, name: str, stage: str, day: date) -> Outcome:
    """A webhook: deal ``deal_id`` entered ``stage`` on ``day``."""
    runner.clock.set(max(runner.clock.now(), epoch_ms(day, 8)))
    return runner.run(
        "followup_register",
        {
            "deal_id": deal_id,
            "deal_name": name,
            "stage": stage,
            "today": day.isoformat(),
            "now": runner.clock.now(),
        },
        key=f"webhook:{deal_id}:{stage}:{runner.clock.now()}",
    )


def evaluate(runner: Runner, day: date, key: str, dry_run: bool = False) -> Outcome:
    """An Evaluate run on ``day`` (at 10:00 or later)."""
    runner.clock.set(max(runner.clock.now(), epoch_ms(day, 10)))
    return runner.run(
        "followup_evaluate",
        {"run_key": key, "today": day.isoformat(), "now": runner.clock.now(), "dry_run": dry_run},
        key=key,
    )


def deal(services: Services, deal_id: str, name: str, stage: str) -> None:
    services.crm.put_deal(deal_id, name, stage)  # type: ignore[attr-defined]


def tables(db: Database) -> dict[str, list[dict[str, Any]]]:
    """The watch tables, for comparing whole database states."""
    with db.transaction() as tx:
        return {
            "watches": tx.rows("select * from watches order by id"),
            "watch_steps": tx.rows("select * from watch_steps order by id"),
        }


def step_rows(db: Database) -> list[tuple[str, int, str, str | None]]:
    with db.transaction() as tx:
        return [
            (r["subject_name"], r["step"], r["status"], r["task_id"])
            for r in tx.rows(
                "select w.subject_name, s.step, s.status, s.task_id from watch_steps s join "
                "watches w on w.id = s.watch_id order by w.subject_name, s.step"
            )
        ]


def tasks_of(services: Services) -> list[str]:
    tool = services.tasks
    assert isinstance(tool, FakeTaskTool)
    return [t["title"] for t in tool.tasks()]


def mails_of(services: Services) -> list[dict[str, str]]:
    mailer = services.mail
    assert isinstance(mailer, FakeMailer)
    return mailer.sent()


# -- running twice equals running once -----------------------------------------------------------


def test_a_retried_webhook_does_not_reset_the_cadence(
    services: Services, runner: Runner, db: Database
) -> None:
    deal(services, "D1", "Acme", "Proposal")
    first = register(runner, "D1", "Acme", "Proposal", MONDAY)
    once = tables(db)
    again = register(runner, "D1", "Acme", "Proposal", MONDAY + timedelta(days=3))
    moved = register(runner, "D1", "Acme", "Negotiation", MONDAY + timedelta(days=4))
    assert first.context["created"] and not again.context["created"]
    assert again.context["watch_id"] == moved.context["watch_id"] == first.context["watch_id"]
    assert tables(db) == once


def test_evaluating_twice_equals_evaluating_once(
    services: Services, runner: Runner, db: Database
) -> None:
    deal(services, "D1", "Acme", "Proposal")
    deal(services, "D2", "Globex", "Negotiation")
    register(runner, "D1", "Acme", "Proposal", MONDAY)
    register(runner, "D2", "Globex", "Negotiation", MONDAY)
    first = evaluate(runner, NEXT_MONDAY, "ev-1")
    after_once = (tables(db), tasks_of(services), mails_of(services))
    second = evaluate(runner, NEXT_MONDAY, "ev-2")
    assert first.status == second.status == "done"
    assert [c["subject_name"] for c in first.context["created"]] == ["Acme", "Globex"]
    assert second.context["created"] == []
    assert (tables(db), tasks_of(services), mails_of(services)) == after_once
    assert len(after_once[1]) == 2 and len(after_once[2]) == 1


def test_a_won_deal_closes_its_watch_and_its_steps(
    services: Services, runner: Runner, db: Database
) -> None:
    deal(services, "D1", "Acme", "Proposal")
    register(runner, "D1", "Acme", "Proposal", MONDAY)
    deal(services, "D1", "Acme", "Won")
    won = register(runner, "D1", "Acme", "Won", MONDAY + timedelta(days=2))
    assert won.snapshot.value == "closed" and won.context["closed"] is True
    assert {status for _, _, status, _ in step_rows(db)} == {"skipped"}
    assert evaluate(runner, NEXT_MONDAY, "ev-1").context["created"] == []
    no_stage = register(runner, "D9", "Nobody", "", MONDAY)
    assert no_stage.status == "error" and no_stage.snapshot.error["name"] == "UnknownStage"


# -- one run at a time ---------------------------------------------------------------------------


class HeldTaskTool(FakeTaskTool):
    """A task tool whose first ``create_task`` waits until released (a slow run in flight)."""

    def __init__(self, world: FakeWorld) -> None:
        super().__init__(world)
        self.entered = threading.Event()
        self.release = threading.Event()

    def create_task(self, external_key: str, title: str, body: str, due_on: str) -> str:
        if not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(10), "the test never released the held run"
        return super().create_task(external_key, title, body, due_on)


def test_overlapping_runs_do_not_double_create_tasks(
    db: Database, world: FakeWorld, new_runner: NewRunner
) -> None:
    services = make_services(db, world)
    held = HeldTaskTool(world)
    services.tasks = held
    deal(services, "D1", "Acme", "Proposal")
    register(new_runner(services), "D1", "Acme", "Proposal", MONDAY)
    slow_runner = new_runner(services, epoch_ms(NEXT_MONDAY, 10))
    outcomes: dict[str, Outcome] = {}
    slow = threading.Thread(
        target=lambda: outcomes.setdefault("slow", evaluate(slow_runner, NEXT_MONDAY, "ev-10:00"))
    )
    slow.start()
    assert held.entered.wait(10)
    overlapping = evaluate(
        new_runner(services, epoch_ms(NEXT_MONDAY, 10) + 600_000), NEXT_MONDAY, "ev-10:10"
    )
    held.release.set()
    slow.join(10)
    assert overlapping.snapshot.value == "overlapping"
    assert overlapping.context["created"] == []
    assert outcomes["slow"].snapshot.value == "completed"
    assert tasks_of(services) == ["Follow up: Acme (step 1 of 3)"]
    assert held.duplicates() == 0


def test_a_claim_held_past_the_schedule_alerts_and_a_stale_one_is_taken_over(
    services: Services, runner: Runner, db: Database
) -> None:
    deal(services, "D1", "Acme", "Proposal")
    register(runner, "D1", "Acme", "Proposal", MONDAY)
    died_at = epoch_ms(NEXT_MONDAY, 10)
    with db.transaction() as tx:  # a run that died holding the claim
        assert repository.claim_run(tx, "followup_evaluate", "ev-10:00", died_at, 1)["granted"]
    runner.clock.set(died_at + 10 * 60_000)
    assert evaluate(runner, NEXT_MONDAY, "ev-10:10").snapshot.value == "overlapping"
    runner.clock.set(died_at + services.settings.claim_alert_after_ms + 60_000)
    blocked = evaluate(runner, NEXT_MONDAY, "ev-11:01")
    assert blocked.status == "error" and blocked.snapshot.error["name"] == "ClaimHeldTooLong"
    assert (
        "run ev-10:00 has held the followup_evaluate claim for 1.0 h"
        in blocked.snapshot.error["message"]
    )
    assert blocked.alert is not None and blocked.alert.snapshot.value == "alerted"
    assert [m["subject"] for m in mails_of(services)] == [
        "[followup] followup_evaluate failed: ClaimHeldTooLong"
    ]
    runner.clock.set(died_at + services.settings.claim_stale_after_ms + 1)
    later = evaluate(runner, NEXT_MONDAY, "ev-later")
    assert later.snapshot.value == "completed" and later.context["abandoned"] == ["ev-10:00"]
    with db.transaction() as tx:
        log = {r["run_key"]: r["status"] for r in repository.run_log(tx, "followup_evaluate")}
    assert log == {"ev-10:00": "abandoned", "ev-11:01": "failed", "ev-later": "ok"}
    assert tasks_of(services) == ["Follow up: Acme (step 1 of 3)"]


# -- a lost webhook repaired by reconciliation ---------------------------------------------------


def test_reconciliation_repairs_lost_webhooks(
    services: Services, runner: Runner, db: Database
) -> None:
    deal(services, "D1", "Acme", "Proposal")
    deal(services, "D2", "Globex", "Negotiation")  # its webhook was lost
    deal(services, "D3", "Initech", "Lead")  # not in scope
    register(runner, "D1", "Acme", "Proposal", MONDAY)
    first = evaluate(runner, MONDAY, "ev-1")
    assert first.context["reconciled"] == {"registered": ["Globex"], "closed": []}
    due = evaluate(runner, NEXT_MONDAY, "ev-2")
    assert [c["subject_name"] for c in due.context["created"]] == ["Acme", "Globex"]
    deal(services, "D1", "Acme", "Won")  # and this webhook was lost too
    later = evaluate(runner, MONDAY + timedelta(days=16), "ev-3")
    assert later.context["reconciled"] == {"registered": [], "closed": ["D1"]}
    assert [c["subject_name"] for c in later.context["created"]] == ["Globex"]
    with db.transaction() as tx:
        closed = tx.one("select status, closed_reason from watches where subject_id = 'D1'")
    assert closed == {"status": "closed", "closed_reason": "left scope"}


# -- database failure fatal, third-party failure skippable ---------------------------------------


def test_a_task_tool_failure_skips_the_item_and_the_run_ends_partial(
    services: Services, runner: Runner, db: Database, world: FakeWorld
) -> None:
    for deal_id, name in (("D1", "Acme"), ("D2", "Globex")):
        deal(services, deal_id, name, "Proposal")
        register(runner, deal_id, name, "Proposal", MONDAY)
    world.fail("tasks", times=3)  # every attempt for Acme's step fails
    run = evaluate(runner, NEXT_MONDAY, "ev-1")
    assert run.status == "partial" and run.alert is None
    assert run.retries == 2
    assert [s["item"] for s in run.context["skipped"]] == ["Acme step 1"]
    assert [c["subject_name"] for c in run.context["created"]] == ["Globex"]
    assert ("Acme", 1, "pending", None) in step_rows(db)
    with db.transaction() as tx:
        assert repository.run_log(tx, "followup_evaluate")[0]["status"] == "partial"
    retry = evaluate(runner, NEXT_MONDAY, "ev-2")
    assert retry.status == "done"
    assert [c["subject_name"] for c in retry.context["created"]] == ["Acme"]


def test_a_crm_outage_skips_reconciliation_but_not_the_due_tasks(
    services: Services, runner: Runner, world: FakeWorld
) -> None:
    deal(services, "D1", "Acme", "Proposal")
    register(runner, "D1", "Acme", "Proposal", MONDAY)
    deal(services, "D2", "Globex", "Proposal")
    world.fail("crm", times=FOREVER)
    run = evaluate(runner, NEXT_MONDAY, "ev-1")
    assert run.status == "partial"
    assert [s["error"] for s in run.context["skipped"]] == ["CrmUnavailable"]
    assert run.context["reconciled"] is None
    assert tasks_of(services) == ["Follow up: Acme (step 1 of 3)"]


def test_a_database_failure_fails_the_run_and_alerts(
    services: Services, runner: Runner, db: Database
) -> None:
    deal(services, "D1", "Acme", "Proposal")
    register(runner, "D1", "Acme", "Proposal", MONDAY)
    with db.transaction() as tx:  # the database loses a table under the workflow's feet
        tx.execute("alter table watch_steps rename to watch_steps_moved")
    run = evaluate(runner, NEXT_MONDAY, "ev-1")
    assert run.status == "error"
    assert run.snapshot.error["name"] == "DatabaseError"
    assert "watch_steps" in run.snapshot.error["message"]
    assert tasks_of(services) == [], "no task was created from a false picture"
    assert run.alert is not None and run.alert.snapshot.value == "alerted"
    [alert] = mails_of(services)
    assert alert["recipient"] == services.settings.ops_inbox
    assert "followup_evaluate failed: DatabaseError" in alert["subject"]
    with db.transaction() as tx:
        assert [r["status"] for r in repository.run_log(tx, "followup_evaluate")] == ["failed"], (
            "the claim was released by logging the failure"
        )


def test_a_mail_failure_fails_the_run_and_alerts_once(
    db: Database, world: FakeWorld, new_runner: NewRunner
) -> None:
    services = make_services(db, world, alert_dedupe_ms=48 * 3_600_000)
    runner = new_runner(services)
    for deal_id, name in (("D1", "Acme"), ("D2", "Globex")):
        deal(services, deal_id, name, "Proposal")
    register(runner, "D1", "Acme", "Proposal", MONDAY)
    register(runner, "D2", "Globex", "Proposal", MONDAY + timedelta(days=1))
    world.fail("mail", times=2)  # both attempts of the notification
    first = evaluate(runner, NEXT_MONDAY, "ev-1")
    world.fail("mail", times=2)
    second = evaluate(runner, NEXT_MONDAY + timedelta(days=1), "ev-2")
    assert first.status == second.status == "error"
    assert first.snapshot.error["name"] == "MailUnavailable"
    assert first.alert is not None and first.alert.snapshot.value == "alerted"
    assert second.alert is not None and second.alert.snapshot.value == "suppressed"
    assert [m["subject"] for m in mails_of(services)] == [
        "[followup] followup_evaluate failed: MailUnavailable"
    ]
    assert len(tasks_of(services)) == 2, "the tasks were created before the mail failed"


def test_a_failing_alerts_run_does_not_alert_itself(
    services: Services, runner: Runner, world: FakeWorld, db: Database
) -> None:
    deal(services, "D1", "Acme", "Proposal")
    register(runner, "D1", "Acme", "Proposal", MONDAY)
    world.fail("mail", times=FOREVER)
    run = evaluate(runner, NEXT_MONDAY, "ev-1")
    assert run.alert is not None and run.alert.status == "error"
    assert run.alert.alert is None
    assert [o.name for o in runner.outcomes].count("followup_alerts") == 1
    with db.transaction() as tx:
        claim = repository.run_log(tx, "followup_evaluate")
    assert [(r["run_key"], r["status"]) for r in claim] == [("ev-1", "failed")], (
        "the claim was released before the alert mail was tried"
    )


# -- dry-run blocks only external writes ---------------------------------------------------------


def test_dry_run_blocks_tasks_and_mail_but_writes_the_database(
    services: Services, runner: Runner, db: Database, world: FakeWorld
) -> None:
    deal(services, "D1", "Acme", "Proposal")
    deal(services, "D2", "Globex", "Proposal")  # registered by the dry run's reconciliation
    register(runner, "D1", "Acme", "Proposal", MONDAY)
    run = evaluate(runner, NEXT_MONDAY, "ev-dry", dry_run=True)
    assert run.status == "done"
    assert world.calls("tasks") == 0 and world.calls("mail") == 0
    assert tasks_of(services) == [] and mails_of(services) == []
    assert run.context["reconciled"]["registered"] == ["Globex"]
    assert ("Acme", 1, "fired", "dry-run") in step_rows(db)
    with db.transaction() as tx:
        assert [r["status"] for r in repository.run_log(tx, "followup_evaluate")] == ["ok"]
    report = runner.run(
        "followup_report",
        {"kind": "morning", "today": NEXT_MONDAY.isoformat(), "dry_run": True},
        key="report-dry",
    )
    assert report.context["message_id"] == "dry-run" and mails_of(services) == []


# -- a stage filter that matches nothing is reported loudly -------------------------------------


def test_a_stage_filter_matching_nothing_fails_loudly(
    db: Database, world: FakeWorld, new_runner: NewRunner
) -> None:
    services = make_services(db, world, in_scope_stages=("Proposal Made", "In Negotiation"))
    runner = new_runner(services)
    deal(services, "D1", "Acme", "Proposal")
    run = evaluate(runner, MONDAY, "ev-1")
    assert run.status == "error"
    assert run.snapshot.error["name"] == "StageFilterMatchesNothing"
    assert "'Proposal Made' (did you mean 'Proposal'?)" in run.snapshot.error["message"]
    [alert] = mails_of(services)
    assert "StageFilterMatchesNothing" in alert["subject"]
    assert "matches no CRM stage" in alert["body"]
    with db.transaction() as tx:
        assert [r["status"] for r in repository.run_log(tx, "followup_evaluate")] == ["failed"]
        assert tx.rows("select * from watches") == []


# -- Report, Enrich ------------------------------------------------------------------------------


def test_reports_read_well_while_the_crm_is_down(
    services: Services, runner: Runner, world: FakeWorld
) -> None:
    deal(services, "D1", "Acme", "Proposal")
    register(runner, "D1", "Acme", "Proposal", MONDAY)
    world.fail("crm", times=FOREVER)
    runner.clock.set(epoch_ms(NEXT_MONDAY, 8))
    morning = runner.run(
        "followup_report", {"kind": "morning", "today": NEXT_MONDAY.isoformat()}, key="r-1"
    )
    friday = NEXT_MONDAY + timedelta(days=4)
    digest = runner.run(
        "followup_report", {"kind": "digest", "today": friday.isoformat()}, key="r-2"
    )
    assert morning.status == digest.status == "done"
    [morning_mail, digest_mail] = mails_of(services)
    assert "- Acme: step 1 of 3, due today" in morning_mail["body"]
    assert morning_mail["subject"] == "Follow-ups, Monday 9 March 2026"
    assert "- Acme: step 1 of 3, 4 business days overdue" not in digest_mail["body"]
    assert digest_mail["subject"] == "Follow-up digest, Friday 13 March 2026"


def test_enrich_summaries_show_in_tasks_and_reports_and_failures_skip(
    services: Services, runner: Runner, world: FakeWorld
) -> None:
    for deal_id, name in (("D1", "Acme"), ("D2", "Globex"), ("D3", "Initech")):
        deal(services, deal_id, name, "Proposal")
        register(runner, deal_id, name, "Proposal", MONDAY)
    now = epoch_ms(NEXT_MONDAY, 9)
    crm = services.crm
    crm.add_email("D1", now - 3_600_000, "bob@acme", "Pricing", "Can we get 10% off?")  # type: ignore[attr-defined]
    crm.add_email("D2", now - 7_200_000, "eve@globex", "Legal", "Contract is with legal.")  # type: ignore[attr-defined]
    world.fail("summarizer", times=2)  # both attempts for Acme
    runner.clock.set(now)
    enrich = runner.run("followup_enrich", {"now": now}, key="enrich-1")
    assert enrich.status == "partial"
    assert enrich.context["summarized"] == ["Globex"]
    assert [s["item"] for s in enrich.context["skipped"]] == ["Acme"]
    evaluate(runner, NEXT_MONDAY, "ev-1")
    tool = services.tasks
    assert isinstance(tool, FakeTaskTool)
    bodies = {t["title"].split(": ")[1].split(" ")[0]: t["body"] for t in tool.tasks()}
    assert "1 recent e-mail(s), latest: Legal\nNext step: reply to eve@globex." in bodies["Globex"]
    assert "Recent e-mails" not in bodies["Acme"] and "Recent e-mails" not in bodies["Initech"]


# -- a run killed mid-way and resumed --------------------------------------------------------------


class Killed(BaseException):
    """Stops the in-memory worker dead, right after the task tool made a task."""


class KillingTaskTool(FakeTaskTool):
    def create_task(self, external_key: str, title: str, body: str, due_on: str) -> str:
        super().create_task(external_key, title, body, due_on)
        raise Killed()


def test_a_run_killed_after_creating_a_task_resumes_without_a_duplicate(
    services: Services, runner: Runner, world: FakeWorld, db: Database
) -> None:
    deal(services, "D1", "Acme", "Proposal")
    deal(services, "D2", "Globex", "Proposal")
    register(runner, "D1", "Acme", "Proposal", MONDAY)
    register(runner, "D2", "Globex", "Proposal", MONDAY)
    real = services.tasks
    services.tasks = KillingTaskTool(world)
    runner.clock.set(epoch_ms(NEXT_MONDAY, 10))
    input = {"run_key": "ev-1", "today": NEXT_MONDAY.isoformat(), "now": runner.clock.now()}
    with pytest.raises(Killed):
        runner.run("followup_evaluate", input, key="ev-1")
    services.tasks = real
    assert tasks_of(services) == ["Follow up: Acme (step 1 of 3)"]
    assert ("Acme", 1, "pending", None) in step_rows(db), "the task id was never recorded"
    resumed = runner.resume("followup_evaluate", "ev-1", input)
    assert resumed.snapshot.value == "completed"
    assert [c["task_id"] for c in resumed.context["created"]] == ["T-1", "T-2"]
    assert tasks_of(services) == [
        "Follow up: Acme (step 1 of 3)",
        "Follow up: Globex (step 1 of 3)",
    ]
    assert ("Acme", 1, "fired", "T-1") in step_rows(db)
