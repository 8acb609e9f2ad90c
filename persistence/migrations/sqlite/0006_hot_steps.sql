-- Schema version 6: the stuck-runs index over the minute of the last update (as on PostgreSQL,
-- where it lets a step that leaves a run's indexed columns as they were update its row in
-- place, a HOT update; migrations/postgres/0006_hot_steps.sql says how).
-- workflow_runs.updated_minute: updated_at (epoch ms) rounded down to the minute, computed by
-- the database (a generated column; SQLite can add only a virtual one). A stuck query filters
-- on both (updated_minute <= updated_at) and orders by both (the same order).

ALTER TABLE workflow_runs ADD COLUMN updated_minute integer
    GENERATED ALWAYS AS (updated_at - updated_at % 60000) VIRTUAL;
DROP INDEX workflow_runs_stuck;
CREATE INDEX workflow_runs_stuck ON workflow_runs (updated_minute, wake_at)
    WHERE status = 'active';
