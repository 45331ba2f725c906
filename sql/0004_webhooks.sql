-- Registered webhooks and the durable delivery outbox (SPEC.md 4.12, 6.1; DESIGN.md 2 and 7).

CREATE TABLE webhooks (
  id              bigserial PRIMARY KEY,
  account_id      bigint NOT NULL REFERENCES accounts(id),
  url             text NOT NULL,
  secret          text NOT NULL,
  events          text[] NOT NULL,
  active          boolean NOT NULL DEFAULT true,
  disabled_reason text,
  created_at      timestamptz NOT NULL DEFAULT now(),
  deleted_at      timestamptz
);
CREATE INDEX webhooks_account ON webhooks (account_id) WHERE deleted_at IS NULL;

-- One row per (event, destination), inserted in the transaction that makes the job terminal.
-- The body is stored as text so the signed bytes are identical on every retry.
CREATE TABLE webhook_deliveries (
  id              text PRIMARY KEY,
  event_id        text NOT NULL,
  account_id      bigint NOT NULL REFERENCES accounts(id),
  webhook_id      bigint REFERENCES webhooks(id),
  job_id          text NOT NULL REFERENCES jobs(id),
  event           text NOT NULL CHECK (event IN ('job.completed', 'job.failed')),
  url             text NOT NULL,
  secret          text NOT NULL,
  body            text NOT NULL,
  status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed', 'disabled')),
  attempts        integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL DEFAULT now(),
  claimed_until   timestamptz,
  last_status_code integer,
  last_error      text,
  last_latency_ms integer,
  created_at      timestamptz NOT NULL DEFAULT now(),
  delivered_at    timestamptz
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries (webhook_id, created_at DESC);

-- Every attempt, for GET /v1/webhooks/{id}/deliveries.
CREATE TABLE webhook_attempts (
  id            bigserial PRIMARY KEY,
  delivery_id   text NOT NULL REFERENCES webhook_deliveries(id),
  attempt       integer NOT NULL,
  attempted_at  timestamptz NOT NULL DEFAULT now(),
  status_code   integer,
  latency_ms    integer,
  error         text
);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id, attempt);
