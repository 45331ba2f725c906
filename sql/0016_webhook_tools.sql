-- Webhook tools (README "Dashboard", docs/webhook-tools.md): a test event is a delivery with no
-- job, sent at once from the API; manual sends (test, redeliver) keep the receiver's answer
-- excerpt, which the pool's attempts only keep inside last_error for a non-2xx answer.
ALTER TABLE webhook_deliveries ALTER COLUMN job_id DROP NOT NULL;
ALTER TABLE webhook_deliveries DROP CONSTRAINT IF EXISTS webhook_deliveries_event_check;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_event_check
  CHECK (event IN ('job.completed', 'job.failed', 'webhook.test'));
ALTER TABLE webhook_attempts ADD COLUMN response_excerpt text;
ALTER TABLE webhook_attempts ADD COLUMN manual boolean NOT NULL DEFAULT false;
-- The operator's "failing deliveries" view (GET /v1/admin/deliveries): the newest first.
CREATE INDEX webhook_deliveries_failing ON webhook_deliveries (created_at DESC)
  WHERE status = 'failed' OR (status = 'pending' AND attempts > 0);
