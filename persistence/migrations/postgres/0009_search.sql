-- Schema 9: search attributes, and what waiting for answers needs (docs/persistence.md,
-- "Run lifecycle").
--
-- workflow_search: one row per indexed field of a run's context (the definition's or the
-- Runtime's `search` names), written by the step that changes it, in the step's transaction.
-- One (name, value) table rather than a typed column per attribute: attributes are declared
-- in code, per workflow, and added or dropped with a deploy, which must not need an ALTER
-- TABLE of the runs; one B-tree on (name, value, run_id) answers every equality search
-- (`--where customer=42`) of every workflow, index-only, and the run rows are then read by
-- their primary key. Values are text (a string as it is, a number or boolean as JSON), so a
-- search compares text.
CREATE TABLE workflow_search (
    run_id uuid NOT NULL REFERENCES workflow_runs (id) ON DELETE CASCADE,
    name   text NOT NULL,
    value  text NOT NULL,
    PRIMARY KEY (run_id, name)
);
CREATE INDEX workflow_search_value ON workflow_search (name, value, run_id);

-- workflow_events.inbox_id: the inbox row whose event this journal entry applied (NULL for
-- timers, results of effects and store-applied events), so that a sender waiting for its
-- event's step finds it after the inbox row is gone.
ALTER TABLE workflow_events ADD COLUMN inbox_id bigint;

-- workflow_waiters: runs someone waits on (`Runtime.wait`, a send with `wait`). A step that
-- commits a run listed here sends a NOTIFY naming it; other steps send none. `expires_at`
-- bounds a row a killed waiter left behind: past it the row tells no one, and the next waiter
-- of the run deletes it (a deleted run takes its rows with it).
CREATE TABLE workflow_waiters (
    run_id     uuid        NOT NULL REFERENCES workflow_runs (id) ON DELETE CASCADE,
    waiter     text        NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, waiter)
);

-- Called by every statement that writes a run's step, after it has locked the run's row: a
-- VOLATILE function reads workflow_waiters in a snapshot of its own, taken then, so it sees a
-- waiter that registered (under a share lock of the same row, `PostgresStore.watch`) while
-- the statement waited for that lock; a waiter registered later reads the step itself.
CREATE FUNCTION statecharts_tell_waiters(run uuid) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_notify(left('statecharts_wake_' || current_schema(), 63), 'ran:' || run::text)
    FROM workflow_waiters WHERE run_id = run AND expires_at > now() LIMIT 1;
END
$$;
