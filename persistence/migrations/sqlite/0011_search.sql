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
    run_id text NOT NULL REFERENCES workflow_runs (id) ON DELETE CASCADE,
    name   text NOT NULL,
    value  text NOT NULL,
    PRIMARY KEY (run_id, name)
) WITHOUT ROWID;
CREATE INDEX workflow_search_value ON workflow_search (name, value, run_id);

-- workflow_events.inbox_id: the inbox row whose event this journal entry applied (NULL for
-- timers, results of effects and store-applied events), so that a sender waiting for its
-- event's step finds it after the inbox row is gone. (SQLite has no waiters table: a waiter
-- there reads again with a bounded backoff, as no other process can notify it.)
ALTER TABLE workflow_events ADD COLUMN inbox_id integer;
