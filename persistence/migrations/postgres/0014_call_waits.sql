-- Schema version 14: limited calls wait beside their run (docs/limits.md).
-- workflow_calls.waiting_for: why a pending call is not claimable yet ("waiting for capacity:
-- crm", "rate limited: crm", "paused by Retry-After: crm"): a call of a limited call site, or
-- of a run of a limited workflow, that asked its limit for a place and was refused. It is due
-- again when its place is freed for it (a woken call) or at the time the refusal said.

ALTER TABLE workflow_calls ADD COLUMN waiting_for text;
