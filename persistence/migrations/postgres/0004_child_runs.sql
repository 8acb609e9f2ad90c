-- Schema version 4: child runs (docs/persistence.md, "Child runs").
-- workflow_runs.parent_run_id: the run whose invoke or spawn_child started this one (its id as
-- text), NULL for a top-level run. workflow_runs.parent_invoke_id: the child's id in its
-- parent (the invoke id); set to NULL when the parent stops the child (it then reports to no
-- one: a late result of a stopped child must not reach the invoke that replaced it).
-- The idempotent-start index leaves child runs out: a child's key names it under its parent
-- and the step that starts it is committed once; a re-entered invoke starts a new child while
-- the stopped one may still be finishing its cancellation.

ALTER TABLE workflow_runs ADD COLUMN parent_run_id text;
ALTER TABLE workflow_runs ADD COLUMN parent_invoke_id text;
CREATE INDEX workflow_runs_children ON workflow_runs (parent_run_id, parent_invoke_id)
    WHERE parent_run_id IS NOT NULL;
DROP INDEX workflow_runs_active_key;
CREATE UNIQUE INDEX workflow_runs_active_key ON workflow_runs (workflow_name, key)
    WHERE status = 'active' AND key IS NOT NULL AND parent_run_id IS NULL;
