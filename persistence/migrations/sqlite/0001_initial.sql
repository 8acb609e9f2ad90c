-- statecharts durable runs, schema version 1 (SQLite: times are epoch milliseconds, JSON is text).
-- Applied by `statecharts db upgrade --store URL`; the runner records the version in
-- statecharts_schema_version in the same transaction.

CREATE TABLE workflow_runs (
    id               text PRIMARY KEY,
    workflow_name    text        NOT NULL,
    workflow_version text        NOT NULL,          -- definition fingerprint the run is pinned to
    key              text,                          -- idempotency key of the start (nullable)
    state            text        NOT NULL,          -- active leaf paths, e.g. creating.waiting
    snapshot         text        NOT NULL,          -- the whole persisted snapshot
    status           text        NOT NULL DEFAULT 'active'
                     CHECK (status IN ('active', 'done', 'done_partial', 'error', 'cancelled')),
    attempt_count    integer     NOT NULL DEFAULT 0,
    created_at       integer     NOT NULL,
    updated_at       integer     NOT NULL,
    completed_at     integer,
    failed_at        integer,
    last_error       text,
    wake_at          integer,                   -- when the run next needs a worker
    lease_owner      text,
    lease_expires_at integer,
    version          integer     NOT NULL DEFAULT 1  -- optimistic-concurrency counter = step number
);

-- Resumable runs: everything a worker may have to pick up, in due order.
CREATE INDEX workflow_runs_resumable ON workflow_runs (wake_at) WHERE wake_at IS NOT NULL;
-- Stuck runs: active runs by last touch; the wake-up time is part of the test (waiting for a
-- later timer is not stuck), so it is in the index too.
CREATE INDEX workflow_runs_stuck ON workflow_runs (updated_at, wake_at) WHERE status = 'active';
-- Idempotent start: one active run per (workflow, key).
CREATE UNIQUE INDEX workflow_runs_active_key ON workflow_runs (workflow_name, key)
    WHERE status = 'active' AND key IS NOT NULL;
CREATE INDEX workflow_runs_listing ON workflow_runs (workflow_name, status, created_at);
CREATE INDEX workflow_runs_created ON workflow_runs (created_at);
-- For listing and counting runs the way the operator UI (persistence/ui) does, with many runs:
-- runs per state of a workflow (heat map, state filter), definition versions in use, runs by
-- start key in any status, one status across all workflows newest first.
CREATE INDEX workflow_runs_states ON workflow_runs (workflow_name, state, status, created_at);
CREATE INDEX workflow_runs_versions ON workflow_runs (workflow_name, workflow_version, status);
CREATE INDEX workflow_runs_key ON workflow_runs (key) WHERE key IS NOT NULL;
CREATE INDEX workflow_runs_status ON workflow_runs (status, created_at);

-- Outbox: effects written with the step that produced them, executed after commit.
CREATE TABLE workflow_effects (
    idempotency_key text        PRIMARY KEY,       -- run id : step : effect index
    run_id          text        NOT NULL REFERENCES workflow_runs (id) ON DELETE CASCADE,
    step            integer     NOT NULL,
    effect_index    integer     NOT NULL,
    kind            text        NOT NULL,
    payload         text        NOT NULL,
    status          text        NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'done', 'skipped', 'failed')),
    result          text,
    error           text,
    created_at      integer     NOT NULL,
    updated_at      integer     NOT NULL,
    UNIQUE (run_id, step, effect_index)
);
CREATE INDEX workflow_effects_pending ON workflow_effects (run_id) WHERE status = 'pending';

-- Inbox: events sent to runs from outside, deleted in the transaction that applies them.
CREATE TABLE workflow_inbox (
    id         integer PRIMARY KEY AUTOINCREMENT,
    run_id     text        NOT NULL REFERENCES workflow_runs (id) ON DELETE CASCADE,
    event      text        NOT NULL,
    created_at integer     NOT NULL
);
CREATE INDEX workflow_inbox_run ON workflow_inbox (run_id, id);

-- Journal: append-only, one row per applied event.
CREATE TABLE workflow_events (
    id           integer PRIMARY KEY AUTOINCREMENT,
    run_id       text        NOT NULL REFERENCES workflow_runs (id) ON DELETE CASCADE,
    step         integer     NOT NULL,
    event        text        NOT NULL,
    state_before text        NOT NULL,
    state_after  text        NOT NULL,
    created_at   integer     NOT NULL
);
CREATE INDEX workflow_events_run ON workflow_events (run_id, id);

-- Circuit breakers shared by all workers.
CREATE TABLE workflow_breakers (
    name          text        PRIMARY KEY,
    state         text        NOT NULL,
    failure_count integer     NOT NULL DEFAULT 0,
    opened_at     integer,
    data          text        NOT NULL DEFAULT '{}',
    updated_at    integer     NOT NULL,
    version       integer     NOT NULL
);

-- "One run at a time" claims with a staleness window.
CREATE TABLE workflow_claims (
    name       text        PRIMARY KEY,
    owner      text        NOT NULL,
    run_id     text,
    claimed_at integer     NOT NULL,
    expires_at integer     NOT NULL
);

-- Scheduled starts: last fire time, advanced with the run it starts.
CREATE TABLE workflow_schedules (
    name         text        PRIMARY KEY,
    last_fire_at integer,
    version      integer     NOT NULL
);
