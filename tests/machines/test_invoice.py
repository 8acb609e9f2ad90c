"""The invoice workflow on every runner (the in-memory actor, and the durable runtime on SQLite
and PostgreSQL): per-call-site retry policies, one idempotency key across the retries of the
invoice call, database failures fatal, mail failures handled."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from machines.durable import DurableRunner
from machines.fakes import FOREVER, FakeWorld
from machines.invoice import build, fake_services
from machines.invoice.adapters import FakeInvoiceApi, FakeLedger
from machines.invoice.workflow import InvoiceServices
from machines.local import LocalRunner
from machines.mail import FakeMailer
from machines.runs import Outcome
from statecharts import SimulatedClock
from tests.machines.conftest import DSN, RUNNERS, drop_schema

InvoiceRunner = LocalRunner | DurableRunner


class RecordingApi(FakeInvoiceApi):
    """The fake invoice API, noting when and with which key each call came."""

    def __init__(self, world: FakeWorld, clock: SimulatedClock) -> None:
        super().__init__(world)
        self.clock = clock
        self.calls: list[tuple[int, str]] = []

    def create_invoice(
        self,
        order_id: str,
        customer_id: str,
        amount_cents: int,
        currency: str,
        *,
        idempotency_key: str,
    ) -> str:
        self.calls.append((self.clock.now(), idempotency_key))
        return super().create_invoice(
            order_id, customer_id, amount_cents, currency, idempotency_key=idempotency_key
        )


@pytest.fixture
def world(tmp_path: Path) -> Iterator[FakeWorld]:
    fake = FakeWorld(str(tmp_path / "world.db"))
    yield fake
    fake.close()


@pytest.fixture
def clock() -> SimulatedClock:
    return SimulatedClock(1_000_000)


@pytest.fixture
def api(world: FakeWorld, clock: SimulatedClock) -> RecordingApi:
    return RecordingApi(world, clock)


@pytest.fixture(params=RUNNERS)
def runner(
    request: pytest.FixtureRequest,
    world: FakeWorld,
    clock: SimulatedClock,
    api: RecordingApi,
    tmp_path: Path,
) -> Iterator[InvoiceRunner]:
    ledger = FakeLedger(world)
    ledger.put_customer("C1", "Ada Lovelace", "ada@example.com")
    machine = build(InvoiceServices(ledger, api, FakeMailer(world)))
    if request.param == "local":
        yield LocalRunner({machine.id: machine}, clock)
        return
    url = (
        f"sqlite:///{tmp_path / 'runs.db'}"
        if request.param == "durable-sqlite"
        else f"{DSN}?schema=inv_{uuid.uuid4().hex[:10]}"
    )
    durable = DurableRunner(url, [machine], start=clock.now(), lease_ms=60_000)
    api.clock = durable.clock
    yield durable
    durable.close()
    if request.param != "durable-sqlite":
        drop_schema(url)


def order(
    runner: InvoiceRunner, order_id: str, amount: Any = 12_345, customer: str = "C1"
) -> Outcome:
    return runner.run(
        "invoice",
        {"order_id": order_id, "customer_id": customer, "amount_cents": amount},
        key=f"order-{order_id}",
    )


def test_a_healthy_run_completes(runner: InvoiceRunner, world: FakeWorld) -> None:
    run = order(runner, "O1")
    assert run.snapshot.value == "completed"
    assert run.context["invoice_id"] == "INV-0001"
    [mail] = FakeMailer(world).sent()
    assert mail["recipient"] == "ada@example.com" and mail["subject"] == "Invoice INV-0001"
    assert "123.45 EUR" in mail["body"]
    assert world.rows("select * from invoice_records") == [
        {"order_id": "O1", "invoice_id": "INV-0001"}
    ]


def test_the_invoice_api_is_retried_with_backoff_and_one_key(
    runner: InvoiceRunner, world: FakeWorld, api: RecordingApi
) -> None:
    world.fail("invoice_api", times=4)
    run = order(runner, "O1")
    assert run.snapshot.value == "completed" and run.retries == 4
    times = [t for t, _ in api.calls]
    assert [b - a for a, b in itertools.pairwise(times)] == [1000, 2000, 4000, 8000]
    assert len({key for _, key in api.calls}) == 1
    assert FakeInvoiceApi(world).duplicates() == 0


def test_runs_of_different_orders_get_different_keys(
    runner: InvoiceRunner, api: RecordingApi
) -> None:
    order(runner, "O1")
    order(runner, "O2")
    assert api.calls[0][1] != api.calls[1][1]
    assert [o.context["invoice_id"] for o in runner.outcomes] == ["INV-0001", "INV-0002"]


def test_an_api_that_stays_down_ends_in_failed(
    runner: InvoiceRunner, world: FakeWorld, api: RecordingApi
) -> None:
    world.fail("invoice_api", times=FOREVER)
    run = order(runner, "O1")
    assert run.snapshot.value == "failed" and len(api.calls) == 5
    assert run.context["error"]["name"] == "InvoiceApiUnavailable"
    assert FakeMailer(world).sent() == []


def test_a_rejected_invoice_is_not_retried(runner: InvoiceRunner, api: RecordingApi) -> None:
    run = order(runner, "O1", amount=0)
    assert run.snapshot.value == "failed"
    assert run.context["error"]["name"] == "InvalidOrder"
    assert api.calls == [], "pending refused the order before any call"


def test_a_non_retryable_api_error_goes_straight_to_failed(
    world: FakeWorld, clock: SimulatedClock
) -> None:
    class Refusing(FakeInvoiceApi):
        def create_invoice(self, *args: Any, **kwargs: Any) -> str:
            from machines.invoice.adapters import InvoiceRejected

            raise InvoiceRejected("currency not enabled")

    services = fake_services(world)
    services.ledger.put_customer("C1", "Ada", "ada@example.com")  # type: ignore[attr-defined]
    machine = build(InvoiceServices(services.ledger, Refusing(world), services.mail))
    run = LocalRunner({"invoice": machine}, clock).run(
        "invoice", {"order_id": "O1", "customer_id": "C1", "amount_cents": 100}, key="o1"
    )
    assert run.snapshot.value == "failed" and run.retries == 0
    assert run.context["error"]["name"] == "InvoiceRejected"


def test_a_transient_invoice_database_failure_completes(
    runner: InvoiceRunner, world: FakeWorld, api: RecordingApi
) -> None:
    """Durably, a ledger failure rolls the step back and a worker picks the run up again; in
    memory, where there is no transaction to roll back, it fails the run (issue 16's rule)."""
    world.fail("ledger", times=2)  # the customer lookup, then its first retry
    started = runner.clock.now()
    run = order(runner, "O1")
    if isinstance(runner, LocalRunner):
        assert run.status == "error" and run.snapshot.value == "fetching_customer"
        assert run.snapshot.error["name"] == "LedgerError"
        assert api.calls == []
        return
    assert run.snapshot.value == "completed" and run.context["invoice_id"] == "INV-0001"
    assert world.calls("ledger") == 4, "two failed lookups, the lookup, the recording"
    assert runner.clock.now() - started >= 500 + 1000, "the backoff was durable timers"
    assert len(api.calls) == 1 and FakeInvoiceApi(world).duplicates() == 0
    record = runner.runtime.get(runner.run_ids["order-O1"])
    assert record.status == "done"
    world.fail("ledger", times=1)  # now the recording fails once, after the invoice exists
    again = order(runner, "O2")
    assert again.snapshot.value == "completed"
    assert len(api.calls) == 2, "the invoice call was not made again"
    assert world.rows("select * from invoice_records order by order_id") == [
        {"order_id": "O1", "invoice_id": "INV-0001"},
        {"order_id": "O2", "invoice_id": "INV-0002"},
    ]


def test_a_ledger_that_stays_down_fails_the_durable_run_after_bounded_attempts(
    runner: InvoiceRunner, world: FakeWorld, api: RecordingApi
) -> None:
    world.fail("ledger", times=FOREVER)
    run = order(runner, "O1")
    assert run.status == "error" and run.snapshot.error["name"] in {"LedgerError", "RunFailed"}
    assert "ledger database: unavailable" in str(run.snapshot.error["message"])
    assert api.calls == []
    if isinstance(runner, DurableRunner):
        assert world.calls("ledger") == 10, "the default 10 attempts, the first call included"
        record = runner.runtime.get(runner.run_ids["order-O1"])
        assert record.attempt_count == 10
        # the executor attempted the call 10 times with one key; the 10th failure was then
        # delivered to the machine (no onError here: the run fails with the ledger's error)
        assert record.last_error == "LedgerError: ledger database: unavailable"
        attempts = runner.runtime.store.call_attempts(record.id)
        assert [a.outcome for a in attempts] == ["retrying"] * 9 + ["failed"]
        assert {a.idempotency_key for a in attempts} == {attempts[0].idempotency_key}


def test_an_unknown_customer_fails_the_run(runner: InvoiceRunner) -> None:
    run = order(runner, "O1", customer="C404")
    assert run.status == "error" and run.snapshot.error["name"] == "CustomerNotFound"


def test_mail_gets_a_short_retry_then_the_run_ends_failed(
    runner: InvoiceRunner, world: FakeWorld
) -> None:
    world.fail("mail", times=2)
    assert order(runner, "O1").snapshot.value == "completed"
    world.fail("mail", times=FOREVER)
    run = order(runner, "O2")
    assert run.snapshot.value == "failed" and run.retries == 2
    assert run.context["error"]["name"] == "MailUnavailable"
    assert run.context["invoice_id"] == "INV-0002", "the invoice exists; only the mail failed"
