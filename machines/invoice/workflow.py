"""The invoice machine: ``invoice.json`` wired to a ledger, an invoice API and a mailer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from machines.config import load_config
from machines.invoice.adapters import InvoiceApi, Ledger
from machines.mail import Mailer
from statecharts import Machine, assign, create_machine, from_callable
from statecharts.frozen import thaw

CONFIG = Path(__file__).with_name("invoice.json")


@dataclass
class InvoiceServices:
    """What the invoice workflow talks to."""

    ledger: Ledger
    api: InvoiceApi
    mail: Mailer


def order_is_valid(context: Mapping[str, Any], event: Any) -> bool:
    """An order names a customer and a positive whole amount in cents."""
    amount = context["amount_cents"]
    return (
        bool(context["customer_id"])
        and isinstance(amount, int)
        and not isinstance(amount, bool)
        and amount > 0
    )


def email_text(
    customer: Mapping[str, Any], invoice_id: str, amount_cents: int, currency: str
) -> tuple[str, str]:
    """Subject and body of the invoice mail."""
    amount = f"{amount_cents // 100}.{amount_cents % 100:02d} {currency}"
    return (
        f"Invoice {invoice_id}",
        f"Dear {customer['name']},\n\nplease find invoice {invoice_id} for {amount}.\n",
    )


def build(services: InvoiceServices) -> Machine:
    """The invoice machine wired to ``services``."""

    def fetch_customer(input: dict[str, Any]) -> dict[str, Any]:
        return services.ledger.customer(str(input["customer_id"]))

    def create_invoice(input: dict[str, Any], idempotency_key: str) -> str:
        return services.api.create_invoice(
            str(input["order_id"]),
            str(input["customer_id"]),
            int(input["amount_cents"]),
            str(input["currency"]),
            idempotency_key=idempotency_key,
        )

    def record_invoice(input: dict[str, Any]) -> bool:
        services.ledger.record_invoice(str(input["order_id"]), str(input["invoice_id"]))
        return True

    def send_invoice_email(input: dict[str, Any]) -> str:
        subject, body = email_text(
            input["customer"],
            str(input["invoice_id"]),
            int(input["amount_cents"]),
            str(input["currency"]),
        )
        return services.mail.send(
            str(input["customer"]["email"]), subject, body, key=f"invoice:{input['order_id']}"
        )

    def remember_error(context: Mapping[str, Any], event: Mapping[str, Any]) -> dict[str, Any]:
        return {"error": thaw(event.get("error"))}

    return create_machine(
        load_config(CONFIG),
        guards={"orderIsValid": order_is_valid},
        actions={
            "rejectOrder": assign(
                lambda c, e: {
                    "error": {
                        "name": "InvalidOrder",
                        "message": "an order needs a customer_id and a positive whole amount_cents",
                    }
                }
            ),
            "rememberCustomer": assign(lambda c, e: {"customer": e["output"]}),
            "rememberInvoice": assign(lambda c, e: {"invoice_id": e["output"]}),
            "rememberMessage": assign(lambda c, e: {"message_id": e["output"]}),
            "rememberError": assign(remember_error),
        },
        actors={
            "fetchCustomer": from_callable(fetch_customer, "fetchCustomer"),
            "createInvoice": from_callable(create_invoice, "createInvoice"),
            "recordInvoice": from_callable(record_invoice, "recordInvoice"),
            "sendInvoiceEmail": from_callable(send_invoice_email, "sendInvoiceEmail"),
        },
    )
