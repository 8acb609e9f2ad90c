-- Schema version 12: the run lifecycle (docs/persistence.md, "Run lifecycle"): retention,
-- fork and reset.
-- workflow_key_tombstones: the business key of a purged top-level run, kept until expires_at
-- so that a start with that key (a webhook retried after the purge) still answers "already
-- started" with the purged run's id instead of starting a second run. One row per
-- (workflow, key): the newest purged run's.
-- workflow_events.snapshot: the run's snapshot after the step, on the last journal row of
-- each step the engine took (NULL on the rows the store writes itself: cancel, failure,
-- resume, which leave the snapshot as it was): what a fork or a reset to that step restores.
-- workflow_forks: a run forked from another one (its snapshot after a journal step).
-- workflow_runs_ended: the ended runs by end time, what a purge walks in bounded batches.

CREATE TABLE workflow_key_tombstones (
    workflow_name text    NOT NULL,
    key           text    NOT NULL,
    run_id        text    NOT NULL,                -- the purged run
    purged_at     integer NOT NULL,
    expires_at    integer NOT NULL,                -- the key answers until then
    PRIMARY KEY (workflow_name, key)
);
CREATE INDEX workflow_key_tombstones_expiry ON workflow_key_tombstones (expires_at);

ALTER TABLE workflow_events ADD COLUMN snapshot text;

CREATE TABLE workflow_forks (
    run_id      text    PRIMARY KEY REFERENCES workflow_runs (id) ON DELETE CASCADE,
    forked_from text    NOT NULL,                  -- the original run (it may be purged since)
    step        integer NOT NULL,                  -- the original's journal step forked from
    created_at  integer NOT NULL
);
CREATE INDEX workflow_forks_from ON workflow_forks (forked_from);

CREATE INDEX workflow_runs_ended ON workflow_runs (completed_at, workflow_name)
    WHERE status <> 'active';
