"""Issue 26's scenarios, each on the in-memory runner and on the durable runtime (SQLite, and
PostgreSQL where present): the failure paths release their claim, the machine notices when it
succeeds but does nothing, watches end, and every workflow leaves a run_log row."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from machines.fakes import FakeWorld
from machines.followup import repository
from machines.followup.adapters import FakeCrm
from machines.followup.db import Database
from machines.followup.services import Services
from machines.runs import Outcome
from tests.machines.conftest import MONDAY, NewRunner, Runner, epoch_ms, make_services
from tests.machines.test_followup_rules import deal, mails_of, register, tasks_of

NEXT_MONDAY = MONDAY + timedelta(days=7)


def evaluate_at(runner: Runner, day: date, hour: int) -> Outcome:
    """The scheduled Evaluate of ``day`` at ``hour``:00 (its key is its slot, as in
    ``machines.followup.schedules``)."""
    now = epoch_ms(day, hour)
    runner.clock.set(max(runner.clock.now(), now))
    key = f"followup_evaluate@{now}"
    return runner.run(
        "followup_evaluate", {"run_key": key, "today": day.isoformat(), "now": now}, key=key
    )


def claims(db: Database) -> dict[str, str]:
    with db.transaction() as tx:
        return {
            str(r["run_key"]).split("@")[-1]: str(r["status"])
            for r in repository.run_log(tx, "followup_evaluate")
        }


def watch(db: Database, subject_id: str) -> dict[str, Any] | None:
    with db.transaction() as tx:
        return tx.one(
            "select status, closed_reason from watches where subject_id = ? order by id desc",
            (subject_id,),
        )


def test_a_database_failure_at_ten_releases_the_claim_and_eleven_creates_the_tasks(
    services: Services, runner: Runner, db: Database
) -> None:
    deal(services, "D1", "Acme", "Proposal")
    deal(services, "D2", "Globex", "Negotiation")
    register(runner, "D1", "Acme", "Proposal", MONDAY)
    register(runner, "D2", "Globex", "Negotiation", MONDAY)
    with db.transaction() as tx:  # the database loses a table for a while
        tx.execute("alter table watch_steps rename to watch_steps_moved")
    ten = evaluate_at(runner, NEXT_MONDAY, 10)
    assert ten.status == "error" and ten.snapshot.error["name"] == "DatabaseError"
    assert ten.alert is not None and ten.alert.snapshot.value == "alerted"
    assert claims(db) == {str(epoch_ms(NEXT_MONDAY, 10)): "failed"}, "Alerts released it"
    with db.transaction() as tx:
        tx.execute("alter table watch_steps_moved rename to watch_steps")
    eleven = evaluate_at(runner, NEXT_MONDAY, 11)
    assert eleven.snapshot.value == "completed"
    assert [c["subject_name"] for c in eleven.context["created"]] == ["Acme", "Globex"]
    assert tasks_of(services) == [
        "Follow up: Acme (step 1 of 3)",
        "Follow up: Globex (step 1 of 3)",
    ]
    assert claims(db)[str(epoch_ms(NEXT_MONDAY, 11))] == "ok"
    [alert] = [m for m in mails_of(services) if m["recipient"] == services.settings.ops_inbox]
    assert alert["subject"] == "[followup] followup_evaluate failed: DatabaseError"
    assert (
        f"Run followup_evaluate@{epoch_ms(NEXT_MONDAY, 10)} of followup_evaluate" in alert["body"]
    )


def test_a_wrong_but_existing_stage_filter_is_alerted_within_one_business_day(
    db: Database, world: FakeWorld, new_runner: NewRunner
) -> None:
    services = make_services(db, world, in_scope_stages=("Qualified",))
    runner = new_runner(services)
    for deal_id, name in (("D1", "Acme"), ("D2", "Globex"), ("D3", "Initech")):
        deal(services, deal_id, name, "Proposal")
    deal(services, "D4", "Hooli", "Won")
    monday = [evaluate_at(runner, MONDAY, hour) for hour in range(9, 18)]
    assert {o.status for o in monday} == {"done"}, "one quiet day may be a quiet pipeline"
    assert mails_of(services) == []
    tuesday = evaluate_at(runner, MONDAY + timedelta(days=1), 9)
    assert tuesday.status == "error"
    assert tuesday.snapshot.error["name"] == "NothingInScope"
    assert (
        "no deal has been in scope for 1 business day(s) (since 2026-03-02) while the CRM "
        "has 3 open deal(s)" in tuesday.snapshot.error["message"]
    )
    [alert] = mails_of(services)
    assert alert["subject"] == "[followup] followup_evaluate failed: NothingInScope"
    assert claims(db)[str(epoch_ms(MONDAY + timedelta(days=1), 9))] == "failed"


def test_in_scope_dropping_to_zero_fails_before_any_watch_is_closed(
    db: Database, world: FakeWorld, new_runner: NewRunner
) -> None:
    services = make_services(db, world)
    runner = new_runner(services)
    deal(services, "D1", "Acme", "Proposal")
    assert evaluate_at(runner, MONDAY, 9).context["reconciled"]["registered"] == ["Acme"]
    crm = services.crm
    assert isinstance(crm, FakeCrm)
    crm.rename_stage("Proposal", "Proposal Sent")  # the filter still says Proposal
    crm.set_stages(["Lead", "Qualified", "Proposal Sent", "Negotiation", "Won", "Lost"])
    crm.put_deal("D1", "Acme", "Proposal Sent")
    dropped = evaluate_at(runner, MONDAY, 10)
    assert dropped.status == "error"
    assert dropped.snapshot.error["name"] in {"NothingInScope", "StageFilterMatchesNothing"}
    assert watch(db, "D1") == {"status": "open", "closed_reason": None}


def test_in_scope_dropping_to_zero_with_known_stages_is_caught(
    db: Database, world: FakeWorld, new_runner: NewRunner
) -> None:
    services = make_services(db, world)
    runner = new_runner(services)
    deal(services, "D1", "Acme", "Proposal")
    evaluate_at(runner, MONDAY, 9)
    deal(services, "D1", "Acme", "Qualified")  # moved back; nothing is in scope any more
    dropped = evaluate_at(runner, MONDAY, 10)
    assert dropped.status == "error" and dropped.snapshot.error["name"] == "NothingInScope"
    assert "1 were in scope on 2026-03-02" in dropped.snapshot.error["message"]
    assert watch(db, "D1") == {"status": "open", "closed_reason": None}
    with db.transaction() as tx:  # the failed run's counts survive Alerts' logging
        counts = repository.scope_history(tx, "followup_evaluate")
    assert [(c["in_scope"], c["open_deals"]) for c in counts] == [(1, 1), (0, 1)]
    runner.clock.set(epoch_ms(MONDAY + timedelta(days=9), 9))
    later = evaluate_at(runner, MONDAY + timedelta(days=9), 10)
    assert later.status == "error" and later.snapshot.error["name"] == "NothingInScope", (
        "days later, with no run in between, the drop is still remembered"
    )
    assert watch(db, "D1") == {"status": "open", "closed_reason": None}


def test_a_webhook_with_an_unknown_stage_alerts_and_leaves_the_watch(
    services: Services, runner: Runner, db: Database
) -> None:
    deal(services, "D1", "Acme", "Proposal")
    register(runner, "D1", "Acme", "Proposal", MONDAY)
    crm = services.crm
    assert isinstance(crm, FakeCrm)
    crm.rename_stage("Proposal", "Proposal Sent")
    renamed = register(runner, "D1", "Acme", "Proposal Sent", MONDAY + timedelta(days=1))
    assert renamed.status == "error" and renamed.snapshot.error["name"] == "UnknownStage"
    assert (
        "stage filter ['Proposal', 'Negotiation'] has stage names the CRM does not know"
        in renamed.snapshot.error["message"]
    )
    typo = register(runner, "D1", "Acme", "Negotiaton", MONDAY + timedelta(days=1))
    assert typo.status == "error"
    assert "the webhook's stage 'Negotiaton' is not a CRM stage" in typo.snapshot.error["message"]
    assert watch(db, "D1") == {"status": "open", "closed_reason": None}
    assert [m["subject"] for m in mails_of(services)] == [
        "[followup] followup_register failed: UnknownStage"
    ], "the second one was deduplicated"
    deal(services, "D2", "Globex", "Proposal Sent")
    left = register(runner, "D2", "Globex", "Lead", MONDAY + timedelta(days=1))
    assert left.status == "error", "the filter still names a stage the CRM lost"


def test_an_exhausted_watch_is_closed_and_no_longer_summarized(
    services: Services, runner: Runner, db: Database, world: FakeWorld
) -> None:
    deal(services, "D1", "Acme", "Proposal")
    register(runner, "D1", "Acme", "Proposal", MONDAY)
    crm = services.crm
    assert isinstance(crm, FakeCrm)
    last = None
    for day in (
        MONDAY + timedelta(days=7),
        MONDAY + timedelta(days=16),
        MONDAY + timedelta(days=30),
    ):
        last = evaluate_at(runner, day, 10)
    assert last is not None and last.context["exhausted"] == ["Acme"]
    assert len(tasks_of(services)) == 3
    assert watch(db, "D1") == {"status": "closed", "closed_reason": "exhausted"}
    crm.add_email(
        "D1", epoch_ms(MONDAY + timedelta(days=30), 9), "bob@acme", "Hello", "Still there?"
    )
    calls = world.calls("summarizer")
    now = epoch_ms(MONDAY + timedelta(days=30), 11)
    runner.clock.set(now)
    enrich = runner.run("followup_enrich", {"now": now}, key="enrich-after")
    assert enrich.context["summarized"] == [] and world.calls("summarizer") == calls
    after = evaluate_at(runner, MONDAY + timedelta(days=31), 10)
    assert after.context["created"] == [] and after.context["reconciled"]["registered"] == []


def test_a_deleted_deal_closes_its_watch_subject_gone(
    services: Services, runner: Runner, db: Database
) -> None:
    deal(services, "D1", "Acme", "Proposal")
    deal(services, "D2", "Globex", "Proposal")
    deal(services, "D3", "Initech", "Proposal")
    evaluate_at(runner, MONDAY, 9)
    crm = services.crm
    assert isinstance(crm, FakeCrm)
    crm.delete_deal("D1")
    deal(services, "D2", "Globex", "Qualified")
    run = evaluate_at(runner, MONDAY, 10)
    assert sorted(run.context["reconciled"]["closed"]) == ["D1", "D2"]
    assert watch(db, "D1") == {"status": "closed", "closed_reason": "subject_gone"}
    assert watch(db, "D2") == {"status": "closed", "closed_reason": "left scope"}


def test_every_workflow_writes_run_log(
    services: Services, runner: Runner, db: Database, world: FakeWorld
) -> None:
    deal(services, "D1", "Acme", "Proposal")
    register(runner, "D1", "Acme", "Proposal", MONDAY)
    evaluate_at(runner, NEXT_MONDAY, 10)
    runner.run(
        "followup_enrich", {"run_key": "enrich@1", "now": runner.clock.now()}, key="enrich@1"
    )
    runner.run(
        "followup_report",
        {
            "run_key": "morning@1",
            "kind": "morning",
            "today": NEXT_MONDAY.isoformat(),
            "now": runner.clock.now(),
        },
        key="morning@1",
    )
    world.fail("mail", times=2)
    evaluate_at(runner, MONDAY + timedelta(days=16), 10)  # step 2; fails: the mail is down
    with db.transaction() as tx:
        rows = repository.run_log(tx)
    by_workflow: dict[str, list[str]] = {}
    for row in rows:
        by_workflow.setdefault(str(row["workflow"]), []).append(str(row["status"]))
    assert by_workflow == {
        "followup_register": ["ok"],
        "followup_evaluate": ["ok", "failed"],
        "followup_enrich": ["ok"],
        "followup_report": ["ok"],
        "followup_alerts": ["ok"],
    }


def test_the_error_workflow_input_is_the_same_on_every_runner(
    services: Services, runner: Runner, world: FakeWorld
) -> None:
    deal(services, "D1", "Acme", "Proposal")
    register(runner, "D1", "Acme", "Proposal", MONDAY)
    world.fail("mail", times=2)
    failed = evaluate_at(runner, NEXT_MONDAY, 10)
    assert failed.alert is not None
    given = {
        k: failed.alert.context[k]
        for k in ("run_id", "workflow", "key", "state", "error", "failed_at", "dry_run")
    }
    assert isinstance(given["run_id"], str) and given["run_id"]
    assert given["failed_at"] >= epoch_ms(NEXT_MONDAY, 10)
    del given["run_id"], given["failed_at"]
    assert given == {
        "workflow": "followup_evaluate",
        "key": f"followup_evaluate@{epoch_ms(NEXT_MONDAY, 10)}",
        "state": "failing",
        "dry_run": False,
        "error": {"name": "MailUnavailable", "message": "smtp: unavailable"},
    }


def test_enrich_skips_a_watch_closed_while_it_runs(
    services: Services, runner: Runner, db: Database, world: FakeWorld
) -> None:
    deal(services, "D1", "Acme", "Proposal")
    deal(services, "D2", "Globex", "Proposal")
    evaluate_at(runner, MONDAY, 9)
    crm = services.crm
    assert isinstance(crm, FakeCrm)
    now = epoch_ms(MONDAY, 11)
    for deal_id in ("D1", "D2"):
        crm.add_email(deal_id, now - 60_000, "x@example.com", "Hi", "Hello")
    real = services.summarizer

    class ClosingGlobex:
        """Answers for Acme, and meanwhile Globex is won (its watch closes)."""

        def complete(self, prompt: str) -> str:
            with db.transaction() as tx:
                repository.close_watch(tx, "deal", "D2", "won", now)
            return real.complete(prompt)

    services.summarizer = ClosingGlobex()
    runner.clock.set(now)
    enrich = runner.run("followup_enrich", {"now": now}, key="enrich-1")
    assert enrich.context["summarized"] == ["Acme"]
    assert world.calls("summarizer") == 1, "no model call for the closed watch"
