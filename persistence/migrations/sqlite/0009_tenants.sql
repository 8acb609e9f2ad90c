-- Schema version 9: schedules with an overlap policy and a catch-up window (docs/persistence.md,
-- "Scheduled starts"). Per-key limits need no table of their own: a key's share of a limit is
-- the limit `<name>[<key>]` in workflow_limits / workflow_capacity (docs/limits.md).
-- workflow_schedules.last_fire_at: every slot up to it is decided (fired, buffered or skipped).
-- last_run_id: the run the schedule started last (the one a new slot overlaps).
-- buffered_at: the slot buffer_one holds until that run ends.
-- skipped_count / skipped: how many slots were skipped in all, and the latest skips (at most
-- 20 records, JSON: first and last slot, count, reason).

ALTER TABLE workflow_schedules ADD COLUMN last_run_id text;
ALTER TABLE workflow_schedules ADD COLUMN buffered_at integer;
ALTER TABLE workflow_schedules ADD COLUMN skipped_count integer NOT NULL DEFAULT 0;
ALTER TABLE workflow_schedules ADD COLUMN skipped text NOT NULL DEFAULT '[]';
