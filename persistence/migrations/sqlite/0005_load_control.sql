-- Schema version 5: load control (docs/limits.md).
-- workflow_runs.priority: higher is claimed first; a run of priority p is ordered as if it had
-- been due p minutes earlier (the aging rule: a long-due run of low priority is never starved).
-- workflow_runs.waiting_for: why an active run is not moving ("waiting for capacity: crm"),
-- NULL when it is not waiting for a limit.
-- workflow_limits: one row per named limit (the lock that serializes its grants, the recent
-- call times of its rate window, and the pause a Retry-After asked for).
-- workflow_capacity: the slots of concurrency limits and the queue of runs waiting for one.

ALTER TABLE workflow_runs ADD COLUMN priority integer NOT NULL DEFAULT 0
    CHECK (priority BETWEEN 0 AND 1000);
ALTER TABLE workflow_runs ADD COLUMN waiting_for text;

-- The claim order (persistence/stores/base.py, CLAIM_ORDER): the due time, moved earlier by a
-- minute per priority level.
CREATE INDEX workflow_runs_claim ON workflow_runs (wake_at - priority * 60000)
    WHERE wake_at IS NOT NULL;
CREATE INDEX workflow_runs_waiting ON workflow_runs (waiting_for) WHERE waiting_for IS NOT NULL;

CREATE TABLE workflow_limits (
    name         text    PRIMARY KEY,
    paused_until integer,                          -- a Retry-After: no call before this
    recent       text    NOT NULL DEFAULT '[]',    -- epoch ms of the calls in the rate window
    updated_at   integer NOT NULL
);

CREATE TABLE workflow_capacity (
    name       text    NOT NULL,                   -- the limit
    holder     text    NOT NULL,                   -- the call (outbox key) or run holding a place
    run_id     text    NOT NULL REFERENCES workflow_runs (id) ON DELETE CASCADE,
    state      text    NOT NULL CHECK (state IN ('waiting', 'reserved', 'held')),
    owner      text,                               -- held: the lease owner making the call
    queued_at  integer NOT NULL,                   -- the place in the queue, kept across waits
    expires_at integer,                            -- reserved: handed over until then
    PRIMARY KEY (name, holder)
);
CREATE INDEX workflow_capacity_queue ON workflow_capacity (name, state, queued_at, holder);
CREATE INDEX workflow_capacity_run ON workflow_capacity (run_id);
