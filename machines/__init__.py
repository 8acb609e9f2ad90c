"""Example workflows, migrated from n8n with every hidden state made explicit.

- ``machines.invoice``: one invoice run (customer lookup, invoice API with retries and an
  idempotency key, e-mail with a short retry behind the ``smtp`` circuit breaker).
- ``machines.followup``: five workflows sharing one database (Register, Evaluate, Report,
  Enrich, Alerts) that keep CRM deals followed up on a business-day cadence.
- ``machines.demo``: the main job (``python -m machines.demo``).

Each workflow package exposes ``MACHINES: dict[str, Machine]``; tools discover machines by it.
"""
