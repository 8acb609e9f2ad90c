-- Schema version 3: durable trace context (docs/observability.md).
-- workflow_runs.traceparent: the W3C traceparent of the run's start span; every step of the run,
-- whichever worker takes it and however late, is a child of it (one run, one trace).
-- workflow_inbox.traceparent: the traceparent of the `send` that queued the event; the step that
-- applies it links to it. NULL where the run or event was created without trace context.

ALTER TABLE workflow_runs ADD COLUMN traceparent text;
ALTER TABLE workflow_inbox ADD COLUMN traceparent text;
