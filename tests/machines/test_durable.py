"""The workflows on the durable runtime: the invoice on every store, the follow-up machine's
error workflow started by the runtime, and the runtime's own dry-run."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from machines.durable import DurableRunner
from machines.fakes import FOREVER, FakeWorld
from machines.followup import build_machines
from machines.followup.db import Database
from machines.invoice import build
from machines.invoice.adapters import FakeInvoiceApi, FakeLedger
from machines.invoice.workflow import InvoiceServices
from machines.mail import FakeMailer
from tests.machines.conftest import DSN, MONDAY, epoch_ms, make_services

NEXT_MONDAY = MONDAY + timedelta(days=7)


class KeyedApi(FakeInvoiceApi):
    """The fake invoice API, noting the idempotency key of every call."""

    keys: list[str]

    def create_invoice(
        self,
        order_id: str,
        customer_id: str,
        amount_cents: int,
        currency: str,
        *,
        idempotency_key: str,
    ) -> str:
        self.keys.append(idempotency_key)
        return super().create_invoice(
            order_id, customer_id, amount_cents, currency, idempotency_key=idempotency_key
        )


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "memory":
        yield "memory://"
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
    else:
        schema = f"wf_{uuid.uuid4().hex[:8]}"
        yield f"{DSN}?schema={schema}"
        cleanup = Database(f"{DSN}?schema={schema}")
        with cleanup.transaction() as tx:
            tx.execute(f'drop schema "{schema}" cascade')
        cleanup.close()


def test_the_invoice_runs_durably_with_one_key_across_retries(
    store_url: str, tmp_path: Path
) -> None:
    world = FakeWorld(str(tmp_path / "world.db"))
    ledger = FakeLedger(world)
    ledger.put_customer("C1", "Ada", "ada@example.com")
    api = KeyedApi(world)
    api.keys = []
    runner = DurableRunner(store_url, [build(InvoiceServices(ledger, api, FakeMailer(world)))])
    world.fail("invoice_api", times=3)
    started = runner.clock.now()
    run = runner.run(
        "invoice", {"order_id": "O1", "customer_id": "C1", "amount_cents": 900}, key="order-O1"
    )
    assert run.snapshot.value == "completed" and run.retries == 3
    assert len(api.keys) == 4 and len(set(api.keys)) == 1
    assert runner.clock.now() - started >= 1000 + 2000 + 4000, "the backoff waits were timers"
    assert api.duplicates() == 0 and len(api.invoices()) == 1
    again = runner.run(
        "invoice", {"order_id": "O2", "customer_id": "C1", "amount_cents": 900}, key="order-O2"
    )
    assert api.keys[-1] != api.keys[0], "another run, another key"
    assert again.context["invoice_id"] == "INV-0002"
    runner.close()


def test_a_failed_run_starts_the_alerts_workflow_once(
    db: Database, world: FakeWorld, tmp_path: Path
) -> None:
    services = make_services(db, world, in_scope_stages=("Proposal Made",))
    runner = DurableRunner(
        f"sqlite:///{tmp_path / 'runs.db'}", list(build_machines(services).values())
    )
    services.crm.put_deal("D1", "Acme", "Proposal")  # type: ignore[attr-defined]
    run = runner.run(
        "followup_evaluate",
        {"run_key": "ev-1", "today": MONDAY.isoformat(), "now": epoch_ms(MONDAY, 10)},
        key="ev-1",
    )
    assert run.status == "error"
    assert run.snapshot.error["name"] == "StageFilterMatchesNothing"
    assert run.alert is not None and run.alert.snapshot.value == "alerted"
    alerts = runner.runtime.list(name="followup_alerts")
    assert len(alerts) == 1 and alerts[0].key == f"error-of:{runner.run_ids['ev-1']}"
    [mail] = FakeMailer(world).sent()
    assert mail["subject"] == "[followup] followup_evaluate failed: StageFilterMatchesNothing"
    with db.transaction() as tx:
        claim = tx.one("select status from run_log where run_key = 'ev-1'")
    assert claim == {"status": "failed"}, "the run released its claim before failing"
    runner.close()


def test_the_runtimes_dry_run_blocks_task_creation_and_mail(
    db: Database, world: FakeWorld, tmp_path: Path
) -> None:
    services = make_services(db, world)
    machines = list(build_machines(services).values())
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    services.crm.put_deal("D1", "Acme", "Proposal")  # type: ignore[attr-defined]
    live = DurableRunner(url, machines)
    live.run(
        "followup_register",
        {
            "deal_id": "D1",
            "deal_name": "Acme",
            "stage": "Proposal",
            "today": MONDAY.isoformat(),
            "now": 0,
        },
        key="wh-1",
    )
    live.close()
    dry = DurableRunner(url, machines, dry_run=True)
    world.fail("tasks", times=FOREVER)  # would skip the item if it were called at all
    run = dry.run(
        "followup_evaluate",
        {"run_key": "ev-dry", "today": NEXT_MONDAY.isoformat(), "now": epoch_ms(NEXT_MONDAY, 10)},
        key="ev-dry",
    )
    assert run.status == "done"
    assert [c["task_id"] for c in run.context["created"]] == ["dry-run"]
    assert world.calls("tasks") == 0 and world.calls("mail") == 0
    with db.transaction() as tx:
        step = tx.one("select status, task_id from watch_steps where step = 1")
    assert step == {"status": "fired", "task_id": "dry-run"}
    services.crm.add_email(
        "D1",
        epoch_ms(NEXT_MONDAY, 9),
        "bob@acme",
        "Terms",  # type: ignore[attr-defined]
        "Legal approved the terms.",
    )
    enrich = dry.run("followup_enrich", {"now": epoch_ms(NEXT_MONDAY, 10)}, key="enrich-dry")
    assert enrich.context["summarized"] == ["Acme"], "Enrich is not blocked by dry-run"
    with db.transaction() as tx:
        assert tx.one("select summary from watches") == {
            "summary": "1 recent e-mail(s), latest: Terms\nNext step: reply to bob@acme."
        }
    dry.close()


def test_retry_waits_are_counted_from_the_journal(tmp_path: Path) -> None:
    world = FakeWorld(str(tmp_path / "world.db"))
    ledger = FakeLedger(world)
    ledger.put_customer("C1", "Ada", "ada@example.com")
    runner = DurableRunner(
        f"sqlite:///{tmp_path / 'runs.db'}",
        [build(InvoiceServices(ledger, FakeInvoiceApi(world), FakeMailer(world)))],
    )
    world.fail("mail", times=FOREVER)
    run = runner.run(
        "invoice", {"order_id": "O1", "customer_id": "C1", "amount_cents": 900}, key="o1"
    )
    assert run.snapshot.value == "failed" and run.retries == 2
    events = runner.store.list_events(runner.run_ids["o1"])
    waits = [e.state_after for e in events if e.state_after.endswith("waiting_to_retry")]
    assert waits == ["sending_email.waiting_to_retry"] * 2
    runner.close()
