-- Schema version 8: calls run beside their run (docs/persistence.md, "Calls").
-- workflow_calls: one row per invoked function or coroutine, recorded by the step that enters
-- the invoking state. A worker's call executor claims it under a lease of its own (the run is
-- not held meanwhile), and its result is queued in the run's inbox in the transaction that
-- records it. `status`: pending (due at available_at), running (owner holds it until
-- lease_expires_at), done / failed (its result event was queued), stopped (its invoking state
-- was left or its run ended: a late result is dropped).
-- workflow_call_attempts: every attempt of a call (worker, start, end, outcome, error),
-- including attempts lost to a crashed worker.

CREATE TABLE workflow_calls (
    idempotency_key  text    PRIMARY KEY,          -- the outbox key of the start (run:step:index)
    run_id           text    NOT NULL REFERENCES workflow_runs (id) ON DELETE CASCADE,
    step             integer NOT NULL,             -- the run version that recorded it
    call_id          text    NOT NULL,             -- the invoke id: its result's actor id
    payload          text    NOT NULL,             -- the start_child effect's JSON
    status           text    NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'running', 'done', 'failed', 'stopped')),
    attempt          integer NOT NULL DEFAULT 0,
    timeout_ms       integer,                      -- per attempt
    heartbeat_ms     integer,                      -- longest silence between heartbeats
    owner            text,
    lease_expires_at integer,
    available_at     integer NOT NULL,
    details          text,                         -- the last heartbeat's details (JSON)
    error            text,
    created_at       integer NOT NULL,
    updated_at       integer NOT NULL
);
CREATE INDEX workflow_calls_due ON workflow_calls (available_at) WHERE status = 'pending';
CREATE INDEX workflow_calls_held ON workflow_calls (lease_expires_at) WHERE status = 'running';
CREATE INDEX workflow_calls_run ON workflow_calls (run_id, step);

CREATE TABLE workflow_call_attempts (
    idempotency_key text    NOT NULL REFERENCES workflow_calls (idempotency_key)
                            ON DELETE CASCADE,
    attempt         integer NOT NULL,
    run_id          text    NOT NULL,
    worker          text    NOT NULL,
    started_at      integer NOT NULL,
    ended_at        integer,
    outcome         text,                          -- NULL while it runs
    error_name      text,
    message         text,
    traceback       text,
    PRIMARY KEY (idempotency_key, attempt)
);
CREATE INDEX workflow_call_attempts_run ON workflow_call_attempts (run_id);

-- A call's result waits in its run's inbox like any event; call_key names the call it answers,
-- so that the step which stops the call also dead-letters a result queued but not yet applied.
ALTER TABLE workflow_inbox ADD COLUMN call_key text;
