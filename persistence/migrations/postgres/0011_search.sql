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

-- workflow_runs.waiters, waited_until: how many callers wait on the run (`Runtime.wait`, a send
-- with `wait`), until when at most (a killed waiter's count runs out then). A step that writes
-- a run with waiters sends a NOTIFY naming it, read from the row the step wrote (the newest
-- version: a waiter's update commits before the step's or waits for it); other steps send
-- none. Neither column is indexed (a waiter's update is a HOT one); adding them rewrites
-- nothing (a constant default).
ALTER TABLE workflow_runs ADD COLUMN waiters integer NOT NULL DEFAULT 0;
ALTER TABLE workflow_runs ADD COLUMN waited_until timestamptz;
