-- Schema version 9: the traceback of the failure that ended a run.
-- workflow_runs.error_traceback: written with `last_error` when a run fails because code of its
-- machine raised (a named action run from the outbox, an assign or guard inside the step), so
-- the on-call view (the run page, `statecharts runs show`) shows where, as a failed call's
-- attempt does (workflow_call_attempts.traceback). NULL when the failure raised nothing of the
-- user's (a refused value, a row that does not parse). Kept, as last_error is, when a resumed
-- run goes on; not part of the run row every read carries (read by the run's own view).

ALTER TABLE workflow_runs ADD COLUMN error_traceback text;
