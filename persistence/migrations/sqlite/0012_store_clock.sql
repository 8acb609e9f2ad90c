-- The store clock (persistence/stores/clocks.py; docs/persistence.md,
-- "Clocks"). Leases and timers are measured by one clock that does not step back under a run:
-- on SQLite, this machine's monotonic clock (the kernel's, the same in every process until a
-- reboot) plus the offset kept here for the current boot, so every process on the machine
-- reads the same time. offset_ms only grows during a boot (the wall clock is followed when it
-- steps forward, never back); a new boot replaces the row.

CREATE TABLE workflow_clock (
    boot_id   text    PRIMARY KEY,                 -- /proc/sys/kernel/random/boot_id
    offset_ms integer NOT NULL                     -- store time minus the monotonic clock, ms
);
