"""The invoice workflow's downstream systems behind small interfaces, and their fakes.

- ``Ledger``: our own database (customers, invoices recorded against orders). Its failures
  (``LedgerError``) are transient on the durable runtime: the step rolls back and a worker
  picks the run up again after a backoff (in memory, where nothing rolls back, they fail the
  run).
- ``InvoiceApi``: the payment provider's invoice endpoint, idempotent by key like Stripe's.
- Mail: ``machines.mail``.

The fakes live in a ``FakeWorld`` and fail on demand (targets ``ledger``, ``invoice_api``).
"""

from __future__ import annotations

from typing import Any, Protocol

from machines.fakes import FakeWorld


class LedgerError(Exception):
    """Our database failed (transient: the durable step rolls back and is tried again)."""


class CustomerNotFound(LookupError):
    """The order names a customer we do not have."""


class InvoiceApiUnavailable(Exception):
    """The invoice API timed out or answered 5xx (retryable)."""


class InvoiceRejected(Exception):
    """The invoice API refused the invoice (4xx): retrying cannot help."""


class Ledger(Protocol):
    """Customers and the invoices recorded against orders."""

    def customer(self, customer_id: str) -> dict[str, Any]:
        """``{"id", "name", "email"}`` or ``CustomerNotFound``."""
        ...

    def record_invoice(self, order_id: str, invoice_id: str) -> None:
        """Remember the order's invoice (doing it again with the same id changes nothing)."""
        ...


class InvoiceApi(Protocol):
    """Creates invoices; the same ``idempotency_key`` returns the same invoice."""

    def create_invoice(
        self,
        order_id: str,
        customer_id: str,
        amount_cents: int,
        currency: str,
        *,
        idempotency_key: str,
    ) -> str:
        """The invoice id."""
        ...


class FakeLedger:
    """The ledger in the fake world (target ``ledger``)."""

    target = "ledger"

    def __init__(self, world: FakeWorld) -> None:
        self.world = world

    def _check(self) -> None:
        failure = self.world.trip(self.target)
        if failure is not None:
            raise LedgerError(f"ledger database: {failure}")

    def customer(self, customer_id: str) -> dict[str, Any]:
        """The customer row."""
        self._check()
        found = self.world.rows(
            "select id, name, email from customers where id = ?", (customer_id,)
        )
        if not found:
            raise CustomerNotFound(f"no customer {customer_id!r}")
        return found[0]

    def record_invoice(self, order_id: str, invoice_id: str) -> None:
        """Upsert the order's invoice."""
        self._check()
        with self.world.transaction() as tx:
            tx.execute(
                "insert into invoice_records (order_id, invoice_id) values (?, ?) on "
                "conflict (order_id) do update set invoice_id = excluded.invoice_id",
                (order_id, invoice_id),
            )

    def put_customer(self, customer_id: str, name: str, email: str) -> None:
        """Add a customer (demos and tests)."""
        with self.world.transaction() as tx:
            tx.execute(
                "insert into customers (id, name, email) values (?, ?, ?) on conflict "
                "(id) do nothing",
                (customer_id, name, email),
            )


class FakeInvoiceApi:
    """The invoice API in the fake world (target ``invoice_api``); rejects non-positive
    amounts like a real one would."""

    target = "invoice_api"

    def __init__(self, world: FakeWorld) -> None:
        self.world = world

    def create_invoice(
        self,
        order_id: str,
        customer_id: str,
        amount_cents: int,
        currency: str,
        *,
        idempotency_key: str,
    ) -> str:
        """An invoice ``INV-<n>``, or the one already made with this key."""
        failure = self.world.trip(self.target)
        if failure is not None:
            raise InvoiceApiUnavailable(f"invoice API: {failure}")
        if amount_cents <= 0:
            raise InvoiceRejected(f"amount must be positive, got {amount_cents}")
        with self.world.transaction() as tx:
            row = tx.execute(
                "select id from invoices where idempotency_key = ?", (idempotency_key,)
            ).fetchone()
            if row is not None:
                return str(row["id"])
            count = tx.execute("select count(*) from invoices").fetchone()[0]
            invoice_id = f"INV-{count + 1:04d}"
            tx.execute(
                "insert into invoices (id, idempotency_key, order_id, customer_id, "
                "amount_cents, currency) values (?, ?, ?, ?, ?, ?)",
                (invoice_id, idempotency_key, order_id, customer_id, amount_cents, currency),
            )
        return invoice_id

    def invoices(self) -> list[dict[str, Any]]:
        """Every invoice made."""
        return self.world.rows("select * from invoices order by rowid")

    def duplicates(self) -> int:
        """Invoices beyond the first for the same order."""
        rows = self.world.rows("select count(*) - count(distinct order_id) as n from invoices")
        return int(rows[0]["n"])
