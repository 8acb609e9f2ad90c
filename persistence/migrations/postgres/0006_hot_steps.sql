-- Schema version 6: a step that leaves a run's indexed columns as they were updates its row in
-- place (a HOT update: no index entry written), and the journal and the outbox have one index
-- fewer each.
-- workflow_runs.updated_minute: updated_at rounded down to the minute, computed by the database
-- (a stored generated column). The stuck-runs index covers it instead of updated_at, which
-- every step changes: PostgreSQL updates a row in place (HOT) only when no indexed column
-- changes value, and updated_minute changes once a minute at most. A stuck query filters on
-- both (updated_minute <= updated_at, so "updated_at < t" implies "updated_minute < t") and
-- orders by both (the minute is a non-decreasing function of the time: the same order).
-- fillfactor 90: a new page keeps a tenth free, so a run's next version fits beside it (HOT
-- needs the same page); set first, so that the table rewrite below already leaves that room.
-- workflow_events: the primary key is (run_id, id), the order every read of the journal
-- takes, in place of the key on id alone plus the (run_id, id) index: one index entry per
-- journaled event instead of two (and the distribution column in the key, as Citus wants).
-- workflow_effects: the primary key is (run_id, step, effect_index), its unique key until now,
-- in place of the idempotency key, which is made of those three (`<run id>:<step>:<index>`,
-- persistence/stores/base.py) and so was a second unique index over the same rows, the widest
-- one (one entry fewer per effect written and per outcome recorded). Every statement finds
-- effects by run: the pending ones through workflow_effects_pending.

ALTER TABLE workflow_runs SET (fillfactor = 90);
ALTER TABLE workflow_runs ADD COLUMN updated_minute timestamptz NOT NULL
    GENERATED ALWAYS AS (date_bin('1 minute', updated_at, timestamptz '1970-01-01 00:00:00+00'))
    STORED;
DROP INDEX workflow_runs_stuck;
CREATE INDEX workflow_runs_stuck ON workflow_runs (updated_minute, wake_at)
    WHERE status = 'active';

ALTER TABLE workflow_events DROP CONSTRAINT workflow_events_pkey,
    ADD CONSTRAINT workflow_events_pkey PRIMARY KEY (run_id, id);
DROP INDEX workflow_events_run;

ALTER TABLE workflow_effects DROP CONSTRAINT workflow_effects_pkey,
    DROP CONSTRAINT workflow_effects_run_id_step_effect_index_key,
    ADD CONSTRAINT workflow_effects_pkey PRIMARY KEY (run_id, step, effect_index);
