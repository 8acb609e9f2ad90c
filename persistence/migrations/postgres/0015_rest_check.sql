-- Schema version 15: a step from rest locks its run and checks it is still at rest in its one
-- statement (persistence/stores/postgres_statements.py, _FROM_REST_RUN).
-- statecharts_still_at_rest(run): lock the run's row (FOR NO KEY UPDATE, waiting for its
-- holder), then say whether no live event is queued for it and no effect of it is pending.
-- VOLATILE, so that in READ COMMITTED each statement in it reads a snapshot of its own, taken
-- after the lock: it sees an event that a sender holding the row queued and committed before
-- letting go of it. The step's own statement took its snapshot before it waited, and
-- PostgreSQL re-checks a row another transaction only locked (not updated) against nothing.
CREATE FUNCTION statecharts_still_at_rest(run uuid) RETURNS boolean LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM 1 FROM workflow_runs WHERE id = run FOR NO KEY UPDATE;
    RETURN NOT EXISTS (SELECT 1 FROM workflow_inbox i WHERE i.run_id = run AND i.dead_at IS NULL)
        AND NOT EXISTS (SELECT 1 FROM workflow_effects e
                        WHERE e.run_id = run AND e.status = 'pending');
END
$$;
