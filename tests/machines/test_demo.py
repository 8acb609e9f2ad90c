"""The main job runs end to end, in memory and durably (a real worker subprocess SIGKILLed
mid-run), and tells the truth about what happened."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from machines import demo
from machines.fakes import FakeWorld
from machines.followup.db import Database
from tests.machines.conftest import DSN


def run_demo(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code = demo.main(
        ["--workdir", str(tmp_path / "work"), "--diagrams", str(tmp_path / "diagrams"), *args]
    )
    assert code == 0
    return capsys.readouterr().out


def tasks_in(tmp_path: Path) -> list[str]:
    world = FakeWorld(str(tmp_path / "work" / "world.db"))
    return [t["external_key"] for t in world.rows("select external_key from tasks")]


def test_the_demo_runs_in_memory_and_creates_no_duplicates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run_demo(tmp_path, capsys, "--in-memory")
    tasks = tasks_in(tmp_path)
    assert len(tasks) == len(set(tasks)) == 8
    assert "duplicates: 0" in out
    assert f"tasks created: {len(tasks)}" in out
    assert "reconciled: +2 watch (Globex, Umbrella)" in out, "lost webhooks repaired"
    assert "worker KILLED after creating task T-2" in out
    assert (
        "5 task(s): T-1 Acme Corp #1, T-2 Initech #1, T-3 Hooli #1, T-4 Globex #1, "
        "T-5 Umbrella #1" in out
    ), "the resumed run found T-2 instead of making it again"
    assert "FAILED: StageFilterMatchesNothing" in out
    assert "same alert sent recently: suppressed" in out
    assert "a deploy sets the stage filter to ['Qualified']: a real stage, the wrong one" in out
    assert (
        "09:00  evaluate  FAILED: NothingInScope: no deal is in scope but the CRM has 4 "
        "open deal(s); caught by the scope health rule; no watch closed" in out
    ), "the wrong-but-existing filter is caught at its first run"
    assert "skipped Acme Corp step 2 (TaskToolUnavailable)" in out
    assert "after 3 retries of the invoice API" in out
    evaluate_row = next(
        line for line in out.splitlines() if line.strip().startswith("followup_evaluate")
    )
    assert evaluate_row.split()[1] == "135", "hourly 09:00-17:00 on 15 business days"
    world = FakeWorld(str(tmp_path / "work" / "world.db"))
    assert sorted(i["order_id"] for i in world.rows("select order_id from invoices")) == [
        "O-1",
        "O-2",
        "O-3",
    ]
    assert "Diagrams: 9 machines drawn" in out
    assert sorted(p.name for p in (tmp_path / "diagrams").glob("*.svg")) == [
        "followup.followup_alerts.svg",
        "followup.followup_enrich.svg",
        "followup.followup_evaluate.svg",
        "followup.followup_register.svg",
        "followup.followup_report.svg",
        "invoice.svg",
        "orders.fraud_check.svg",
        "orders.order.svg",
        "orders.payment.svg",
    ]


def test_the_demo_runs_durably_on_sqlite_by_default_with_a_worker_killed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run_demo(tmp_path, capsys, "--days", "6")
    assert f"durable, in sqlite:///{tmp_path / 'work' / 'runs.db'}" in out
    assert "KILLED (SIGKILL) after creating task T-2" in out
    assert "the run's row says: processing.creating_task.attempting" in out
    # Evaluate's schedule (overlap skip) fired that run; its next slot came while it still ran
    assert (
        "10:00  evaluate  schedule: slot 10:00 SKIPPED: the previous run was still running" in out
    )
    assert (
        "5 task(s): T-1 Acme Corp #1, T-2 Initech #1, T-3 Hooli #1, T-4 Globex #1, "
        "T-5 Umbrella #1" in out
    )
    assert "duplicates: 0" in out
    tasks = tasks_in(tmp_path)
    assert len(tasks) == len(set(tasks)) == 5
    assert_webhooks_arrived_over_http(out)


def assert_webhooks_arrived_over_http(out: str) -> None:
    """The CRM's webhooks went through the ingress on loopback: created (201), the retried
    delivery answered with the same run (200) and counted once, an unsigned one refused."""
    assert "webhook ingress:    http://127.0.0.1:" in out
    assert "Acme Corp -> Proposal: watch opened (HTTP 201)" in out
    assert (
        "Initech -> Proposal again (CRM retried the webhook): same run, watch 2 (HTTP 200)" in out
    )
    assert "without the CRM's signature: refused, nothing started (HTTP 401)" in out
    register_row = next(
        line for line in out.splitlines() if line.strip().startswith("followup_register")
    )
    assert register_row.split()[1] == "4", "four deliveries, the redelivery starts no run"
    total = next(line for line in out.splitlines() if line.strip().startswith("all"))
    assert f"runs in the store: {total.split()[1]} " in out


@pytest.mark.postgres
def test_the_demo_runs_durably_on_postgresql(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = f"demo_{uuid.uuid4().hex[:8]}"
    try:
        out = run_demo(
            tmp_path,
            capsys,
            "--days",
            "6",
            "--store",
            f"{DSN}?schema={schema}",
            "--followup-db",
            f"{DSN}?schema={schema}_followup",
        )
        assert "KILLED (SIGKILL)" in out and "duplicates: 0" in out
        assert "schedule: slot 10:00 SKIPPED: the previous run was still running" in out
        assert len(tasks_in(tmp_path)) == 5
        assert_webhooks_arrived_over_http(out)
    finally:
        db = Database(f"{DSN}?schema={schema}_followup")
        with db.transaction() as tx:
            tx.execute(f'drop schema if exists "{schema}" cascade')
            tx.execute(f'drop schema if exists "{schema}_followup" cascade')
        db.close()
