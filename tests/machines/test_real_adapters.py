"""The real adapters (httpx for EspoCRM, ClickUp and a Mistral-style chat API; smtplib for
mail) against servers on loopback that speak those APIs' documented shapes: the requests they
make, the answers they read, timeouts, ``Retry-After`` handed to the retry policy, and every
failure mapped onto the machine's declared error name."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from machines.durable import DurableRunner
from machines.fakes import FakeWorld
from machines.followup import build_machines
from machines.followup.adapters import CrmUnavailable, SummarizerUnavailable, TaskToolUnavailable
from machines.followup.clickup import ClickUpTasks
from machines.followup.db import Database
from machines.followup.espocrm import EspoCrm
from machines.followup.mistral import ChatSummarizer
from machines.followup.services import Services, Settings
from machines.http import retry_after_ms
from machines.mail import MailUnavailable
from machines.smtp import SmtpMailer
from tests.machines.conftest import MONDAY, epoch_ms
from tests.machines.loopback import FakeApi, FakeSmtp, http_server, smtp_server

FIELD = "0a1b2c3d-key"


@pytest.fixture
def api() -> FakeApi:
    fake = FakeApi()
    fake.deals = {
        f"o{i}": {"id": f"o{i}", "name": f"Deal {i}", "stage": stage, "assignedUserName": "Ann"}
        for i, stage in enumerate(
            ["Proposal", "Negotiation", "Proposal", "Prospecting", "Closed Won"]
        )
    }
    fake.emails = [
        {
            "id": "e1",
            "parentId": "o0",
            "dateSent": "2026-03-01 10:00:00",
            "fromString": "Bob <bob@acme.test>",
            "name": "Old",
            "bodyPlain": "old",
        },
        {
            "id": "e2",
            "parentId": "o0",
            "dateSent": "2026-03-09 08:30:00",
            "fromString": "Bob <bob@acme.test>",
            "name": "Pricing",
            "bodyPlain": "10% off?",
        },
        {
            "id": "e3",
            "parentId": "o1",
            "dateSent": "2026-03-09 08:00:00",
            "fromString": "Eve",
            "name": "Other deal",
            "bodyPlain": "x",
        },
    ]
    return fake


@pytest.fixture
def base(api: FakeApi) -> Iterator[str]:
    with http_server(api) as url:
        yield url


def test_espocrm_reads_stages_deals_in_pages_counts_and_emails(api: FakeApi, base: str) -> None:
    crm = EspoCrm(base, "espo-key", page_size=2)
    assert crm.stage_names() == ["Prospecting", "Proposal", "Negotiation", "Closed Won"]
    deals = crm.deals_in_stages(["Proposal", "Negotiation"])
    assert [d["id"] for d in deals] == ["o0", "o1", "o2"]
    assert deals[0] == {"id": "o0", "name": "Deal 0", "stage": "Proposal", "owner": "Ann"}
    pages = [s.query["offset"] for s in api.seen if s.path == "/api/v1/Opportunity"]
    assert pages == [["0"], ["2"]], "two pages of two"
    assert crm.count_deals_in_stages(["Prospecting", "Proposal", "Negotiation"]) == 4
    assert crm.get_deal("o3") == {
        "id": "o3",
        "name": "Deal 3",
        "stage": "Prospecting",
        "owner": "Ann",
    }
    assert crm.get_deal("gone") is None, "a 404 is a deleted deal"
    emails = crm.recent_emails("o0", epoch_ms(MONDAY, 0))
    assert emails == [
        {
            "sent_at": epoch_ms(MONDAY + timedelta(days=7), 8) + 1_800_000,
            "sender": "Bob <bob@acme.test>",
            "subject": "Pricing",
            "body": "10% off?",
        }
    ]
    assert all(s.headers["x-api-key"] == "espo-key" for s in api.seen)
    crm.close()


def test_espocrm_failures_are_crm_unavailable_with_retry_after(api: FakeApi, base: str) -> None:
    with pytest.raises(CrmUnavailable, match="HTTP 401") as refused:
        EspoCrm(base, "wrong-key").stage_names()
    assert "wrong-key" not in str(refused.value), "secrets never in messages"
    crm = EspoCrm(base, "espo-key")
    api.fail(status=429, headers={"Retry-After": "7"})
    with pytest.raises(CrmUnavailable) as limited:
        crm.stage_names()
    assert limited.value.retry_after == 7000  # type: ignore[attr-defined]
    api.fail(status=500)
    with pytest.raises(CrmUnavailable, match="HTTP 500") as broken:
        crm.deals_in_stages(["Proposal"])
    assert not hasattr(broken.value, "retry_after")
    api.delay_s = 0.5
    with pytest.raises(CrmUnavailable, match="timed out"):
        EspoCrm(base, "espo-key", timeout_s=0.1).stage_names()


def test_clickup_finds_by_key_before_creating_and_hands_on_its_rate_limit(
    api: FakeApi, base: str
) -> None:
    tool = ClickUpTasks("pk_clickup", "901", FIELD, base_url=f"{base}/api/v2")
    assert tool.find_task("followup:deal:o0:watch-1:step-1") is None
    task_id = tool.create_task(
        "followup:deal:o0:watch-1:step-1", "Follow up: Deal 0", "body", "2026-03-09"
    )
    assert tool.find_task("followup:deal:o0:watch-1:step-1") == task_id
    [created] = [s.body for s in api.seen if s.method == "POST"]
    assert created["custom_fields"] == [{"id": FIELD, "value": "followup:deal:o0:watch-1:step-1"}]
    assert created["due_date"] == epoch_ms(MONDAY + timedelta(days=7), 0)
    api.fail(status=429, headers={"X-RateLimit-Reset": "4102444800"})  # 2100-01-01
    with pytest.raises(TaskToolUnavailable) as limited:
        tool.find_task("k")
    assert limited.value.retry_after > 0  # type: ignore[attr-defined]
    with pytest.raises(TaskToolUnavailable, match="HTTP 401"):
        ClickUpTasks("bad", "901", FIELD, base_url=f"{base}/api/v2").find_task("k")


def test_the_chat_summarizer_speaks_chat_completions(api: FakeApi, base: str) -> None:
    summarizer = ChatSummarizer("mistral-key", model="mistral-small-latest", base_url=base)
    assert summarizer.complete("Summarise.") == api.answer
    [request] = api.seen
    assert request.path == "/v1/chat/completions"
    assert request.body == {
        "model": "mistral-small-latest",
        "temperature": 0,
        "messages": [{"role": "user", "content": "Summarise."}],
    }
    api.fail(status=429, headers={"Retry-After": "3"})
    with pytest.raises(SummarizerUnavailable) as limited:
        summarizer.complete("x")
    assert limited.value.retry_after == 3000  # type: ignore[attr-defined]
    with pytest.raises(SummarizerUnavailable, match="HTTP 401"):
        ChatSummarizer("nope", base_url=base).complete("x")


def test_retry_after_reads_seconds_dates_and_rate_limit_resets() -> None:
    assert retry_after_ms({"retry-after": "12"}) == 12_000
    assert (
        retry_after_ms({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, now_s=1445412480.0)
        == 10_000
    )
    assert retry_after_ms({"x-ratelimit-reset": "1000"}, now_s=990.0) == 10_000
    assert retry_after_ms({"retry-after": "soon"}) is None
    assert retry_after_ms({}) is None


def test_smtp_sends_with_a_message_id_from_the_key_and_maps_refusals() -> None:
    smtp = FakeSmtp()
    with smtp_server(smtp) as port:
        mailer = SmtpMailer("127.0.0.1", port, "followup@example.com", timeout_s=5)
        message_id = mailer.send("sales@example.com", "3 tasks", "body text", key="k-1")
        assert message_id == mailer.message_id("k-1") != mailer.message_id("k-2")
        [received] = smtp.messages
        assert f"Message-ID: {message_id}" in received and "Subject: 3 tasks" in received
        smtp.refuse = "550 mailbox unavailable"
        with pytest.raises(MailUnavailable, match="550 mailbox unavailable"):
            mailer.send("nobody@example.com", "x", "y", key="k-3")
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    with pytest.raises(MailUnavailable, match="ConnectionRefusedError"):
        SmtpMailer("127.0.0.1", closed, timeout_s=2).send("a@b", "s", "b", key="k")


def test_evaluate_and_enrich_on_the_real_adapters_on_the_durable_runtime(
    api: FakeApi, base: str, db: Database, world: FakeWorld, tmp_path: Path
) -> None:
    api.stages = ["Prospecting", "Proposal", "Negotiation", "Won", "Lost"]
    smtp = FakeSmtp()
    with smtp_server(smtp) as port:
        services = Services(
            db,
            EspoCrm(base, "espo-key"),
            ClickUpTasks("pk_clickup", "901", FIELD, base_url=f"{base}/api/v2"),
            SmtpMailer("127.0.0.1", port, "followup@example.com"),
            ChatSummarizer("mistral-key", base_url=base),
            Settings(),
        )
        start = epoch_ms(MONDAY + timedelta(days=7), 10)
        runner = DurableRunner(
            f"sqlite:///{tmp_path / 'runs.db'}",
            list(build_machines(services).values()),
            start=start,
        )
        first = runner.run(
            "followup_evaluate",
            {"run_key": "ev-0", "today": MONDAY.isoformat(), "now": epoch_ms(MONDAY, 10)},
            key="ev-0",
        )
        assert first.context["reconciled"]["registered"] == ["Deal 0", "Deal 1", "Deal 2"]
        api.fail(status=429, headers={"Retry-After": "5"})  # the next answer: EspoCRM's
        before = runner.clock.now()
        due = runner.run(
            "followup_evaluate",
            {"run_key": "ev-1", "today": (MONDAY + timedelta(days=7)).isoformat(), "now": start},
            key="ev-1",
        )
        assert due.snapshot.value == "completed" and due.retries == 1
        assert runner.clock.now() - before >= 5000, "the retry waited Retry-After, not 1 s"
        assert [t["name"] for t in api.tasks] == [
            f"Follow up: Deal {i} (step 1 of 3)" for i in range(3)
        ]
        [notice] = smtp.messages
        assert "Subject: 3 follow-up task(s) created on 2026-03-09" in notice
        enrich = runner.run("followup_enrich", {"now": start + 1_800_000}, key="enrich-1")
        assert enrich.context["summarized"] == ["Deal 0", "Deal 1"], "Deal 2 has no e-mail"
        chats = [r.body for r in api.seen if r.path == "/v1/chat/completions"]
        assert len(chats) == 2 and "Pricing" in chats[0]["messages"][0]["content"]
        with db.transaction() as tx:
            assert tx.one("select summary from watches where subject_id = 'o0'") == {
                "summary": api.answer
            }
        runner.close()


def test_the_environment_switches_each_system_to_its_real_adapter(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FOLLOWUP_DATABASE", f"sqlite:///{tmp_path / 'f.db'}")
    monkeypatch.setenv("FOLLOWUP_FAKES", str(tmp_path / "fakes.db"))
    monkeypatch.setenv("ESPOCRM_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("SMTP_HOST", "127.0.0.1")
    services = Services.from_env()
    assert isinstance(services.crm, EspoCrm) and isinstance(services.mail, SmtpMailer)
    assert type(services.tasks).__name__ == "FakeTaskTool"
    assert type(services.summarizer).__name__ == "FakeSummarizer"
