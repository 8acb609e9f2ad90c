-- Schema version 9: per-key limits (docs/limits.md) and schedules with an overlap policy and a
-- catch-up window (docs/persistence.md, "Scheduled starts").
-- A key's share of a limit is the limit `<name>[<key>]` in workflow_limits / workflow_capacity.
-- workflow_runs.limit_share: the limit (or key's share) a run of a limited workflow takes a
-- place of, written at its start; a refusal of that limit queues the share's unclaimed due
-- runs with it (a page at a time, by the index below), so a backlog leaves the claim order.
-- workflow_schedules.last_fire_at: every slot up to it is decided (fired, buffered or skipped).
-- last_run_id: the run the schedule started last (the one a new slot overlaps).
-- buffered_at: the slot buffer_one holds until that run ends.
-- skipped_count / skipped: how many slots were skipped in all, and the latest skips (at most
-- 20 records, JSON: first and last slot, count, reason).

ALTER TABLE workflow_schedules ADD COLUMN last_run_id text;
ALTER TABLE workflow_schedules ADD COLUMN buffered_at integer;
ALTER TABLE workflow_schedules ADD COLUMN skipped_count integer NOT NULL DEFAULT 0;
ALTER TABLE workflow_schedules ADD COLUMN skipped text NOT NULL DEFAULT '[]';

ALTER TABLE workflow_runs ADD COLUMN limit_share text;
CREATE INDEX workflow_runs_share ON workflow_runs (limit_share, created_at)
    WHERE limit_share IS NOT NULL AND status = 'active' AND waiting_for IS NULL;
