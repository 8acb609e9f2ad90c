"""The invoice workflow: pending -> fetching customer -> creating invoice (retried, with an
idempotency key) -> recording it -> sending the e-mail (short retry, ``smtp`` breaker) ->
completed / failed.

``MACHINES`` is wired to fakes in the SQLite file named by ``INVOICE_FAKES`` (default
``invoice-fakes.db``; connected lazily); ``build(InvoiceServices(...))`` wires real adapters.
"""

from __future__ import annotations

import os

from machines.fakes import FakeWorld
from machines.invoice.adapters import FakeInvoiceApi, FakeLedger
from machines.invoice.workflow import InvoiceServices, build
from machines.mail import FakeMailer
from statecharts import Machine


def fake_services(world: FakeWorld) -> InvoiceServices:
    """The invoice workflow on the fakes of ``world``."""
    return InvoiceServices(FakeLedger(world), FakeInvoiceApi(world), FakeMailer(world))


_machine = build(fake_services(FakeWorld(os.environ.get("INVOICE_FAKES", "invoice-fakes.db"))))
MACHINES: dict[str, Machine] = {_machine.id: _machine}

__all__ = ["MACHINES", "InvoiceServices", "build", "fake_services"]
