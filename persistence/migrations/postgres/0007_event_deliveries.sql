-- Schema version 7: event deliveries, the ingress's per-run deduplication of webhook events.
-- workflow_deliveries: one row per (run, delivery id) an event was queued under (a provider's
-- delivery id: Standard Webhooks' webhook-id, GitHub's X-GitHub-Delivery, Stripe's event id,
-- an Idempotency-Key header). Inserted in the transaction that queues the event, so a delivery
-- posted again (a provider's retry, a replay) finds it and queues nothing: the event is
-- applied once. inbox_id is the queued event's id (the inbox row itself is deleted when a step
-- applies it; this row stays with the run, and goes with it).

CREATE TABLE workflow_deliveries (
    run_id      uuid        NOT NULL REFERENCES workflow_runs (id) ON DELETE CASCADE,
    delivery_id text        NOT NULL,
    inbox_id    bigint      NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (run_id, delivery_id)
);
