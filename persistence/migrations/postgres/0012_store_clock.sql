-- The store clock (persistence/stores/clocks.py; docs/persistence.md,
-- "Clocks"). Leases and timers are measured by one clock that does not step back under a run:
-- on PostgreSQL, the database server's clock (each process anchors to clock_timestamp() and
-- carries it forward with its monotonic clock), so nothing is stored for it; SQLite keeps its
-- anchor in a table of this migration. The comment below says so in the schema itself.

COMMENT ON COLUMN workflow_runs.lease_expires_at IS
    'When the lease ends, in the database server''s time (the store clock, migration store_clock)';
