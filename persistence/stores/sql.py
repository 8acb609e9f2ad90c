"""The SQL store, written once: every `Store` method as SQL text shared by SQLite and PostgreSQL,
composed here from its parts, one concept each:

- `dialect`: the hooks a dialect fills in (plumbing, parameter marker, value conversions, small
  SQL fragments) and the rows it reads back;
- `runs`: runs created, read, cancelled, failed and resumed; `inbox`: events queued for runs,
  delivered between them, dead-lettered; `steps`: pending work read, steps written under their
  fence, a sent event stepped in its send; `leases`: claims, heartbeats, releases;
- `calls` (calls beside their run), `capacity` (named limits), `lifecycle` (retention, fork,
  reset), `run_queries` (the operator's reads), `coordination` (claims, breakers, schedules),
  `reencrypt` (key rotation).

A dialect (`SQLiteStore`, `PostgresStore`) subclasses `SQLStore`; PostgreSQL does its hot paths
in fewer round trips (`claim_work` with `SKIP LOCKED` reading the pending work in the claim's
round trip, one-statement `commit_steps` and `_create_in`, steps from rest, `_read_all`
pipelined). The rules (which runs are claimable, dead-letter reasons, the key format,
completion times) live in `rules.py`, the runs list's WHERE clause ("stuck" among its filters)
in `queries.py`, above every dialect.
"""

from __future__ import annotations

from persistence import schema
from persistence.stores.capacity import SQLCapacity
from persistence.stores.coordination import SQLCoordination
from persistence.stores.leases import SQLLeases
from persistence.stores.lifecycle import SQLLifecycle
from persistence.stores.reencrypt import SQLReencrypt
from persistence.stores.run_queries import SQLQueries


class SQLStore(SQLLifecycle, SQLLeases, SQLQueries, SQLCoordination, SQLCapacity, SQLReencrypt):
    """The whole `Store` in SQL; subclasses are the dialects."""

    def schema_version(self) -> int:
        """The applied schema version (0 if the database is empty)."""
        raise NotImplementedError

    def check_schema(self) -> None:
        """Raise `SchemaVersionError` unless the schema is current."""
        schema.check_current(self.dialect, self.schema_version(), self.url)
