-- Schema version 2: a claim counter per run, and dead letters in the inbox.
-- claim_count: how many times a worker claimed the run (bounded in every failure mode; tests and
-- operators read it). dead_at/dead_reason: an event that can no longer be applied (its run
-- ended) stays visible with the reason instead of being deleted or making the run claimable.

ALTER TABLE workflow_runs ADD COLUMN claim_count integer NOT NULL DEFAULT 0;
ALTER TABLE workflow_inbox ADD COLUMN dead_at timestamptz;
ALTER TABLE workflow_inbox ADD COLUMN dead_reason text;
CREATE INDEX workflow_inbox_live ON workflow_inbox (run_id, id) WHERE dead_at IS NULL;

-- Events already queued for runs that ended become dead letters (they made such runs claimable).
UPDATE workflow_inbox i
   SET dead_at = now(),
       dead_reason = 'the run had ended (' || r.status || ') before this event was applied'
  FROM workflow_runs r
 WHERE r.id = i.run_id AND r.status <> 'active';
