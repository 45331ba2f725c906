-- Foundation: accounts, the append-only credit ledger, API keys, request metering.
-- SPEC.md sections 2.5, 5, 8; DESIGN.md section 3 (credits = sum(credit_entries)).

CREATE TABLE accounts (
  id                  bigserial PRIMARY KEY,
  email               text NOT NULL,
  password_hash       text NOT NULL,
  email_verified      boolean NOT NULL DEFAULT false,
  banned              boolean NOT NULL DEFAULT false,
  credits_locked      boolean NOT NULL DEFAULT false,
  has_purchased       boolean NOT NULL DEFAULT false,
  enterprise          boolean NOT NULL DEFAULT false,
  -- snapshot of sum(credit_entries.delta); never negative
  credits             bigint NOT NULL DEFAULT 0 CHECK (credits >= 0),
  policy_violations   integer NOT NULL DEFAULT 0,
  password_changed_at timestamptz,
  created_at          timestamptz NOT NULL DEFAULT now(),
  updated_at          timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX accounts_email_key ON accounts (lower(email));

CREATE TABLE credit_entries (
  id          bigserial PRIMARY KEY,
  account_id  bigint NOT NULL REFERENCES accounts(id),
  delta       bigint NOT NULL,
  kind        text NOT NULL CHECK (kind IN ('grant', 'purchase', 'charge', 'refund', 'adjustment')),
  job_id      text,
  note        text,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX credit_entries_account ON credit_entries (account_id, id);
CREATE INDEX credit_entries_job ON credit_entries (job_id) WHERE job_id IS NOT NULL;

CREATE TABLE purchases (
  id          bigserial PRIMARY KEY,
  account_id  bigint NOT NULL REFERENCES accounts(id),
  credits     bigint NOT NULL CHECK (credits > 0),
  currency    text,
  amount      numeric,
  created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
  id            bigserial PRIMARY KEY,
  account_id    bigint NOT NULL REFERENCES accounts(id),
  -- SHA-256 of the full secret, hex; the secret itself is never stored
  key_hash      text NOT NULL UNIQUE,
  prefix        text NOT NULL,
  name          text,
  scopes        text[] NOT NULL DEFAULT ARRAY['generate', 'read'],
  expires_at    timestamptz,
  revoked_at    timestamptz,
  last_used_at  timestamptz,
  created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX api_keys_account ON api_keys (account_id) WHERE revoked_at IS NULL;

-- Raw request metering (SPEC.md 1.5): kept METERING_RETENTION_DAYS, rolled up into usage_daily.
CREATE TABLE request_log (
  id          bigserial PRIMARY KEY,
  at          timestamptz NOT NULL,
  account_id  bigint,
  key_id      bigint,
  method      text NOT NULL,
  endpoint    text NOT NULL,
  status      integer NOT NULL,
  credits     integer NOT NULL DEFAULT 0,
  latency_ms  real NOT NULL,
  request_id  text
);
CREATE INDEX request_log_at ON request_log (at);
CREATE INDEX request_log_account ON request_log (account_id, at) WHERE account_id IS NOT NULL;

-- Incremental rollup per account, day and endpoint, so usage summaries never scan raw rows.
CREATE TABLE usage_daily (
  account_id  bigint NOT NULL,
  day         date NOT NULL,
  endpoint    text NOT NULL,
  requests    bigint NOT NULL DEFAULT 0,
  errors      bigint NOT NULL DEFAULT 0,
  credits     bigint NOT NULL DEFAULT 0,
  latency_ms_sum double precision NOT NULL DEFAULT 0,
  PRIMARY KEY (account_id, day, endpoint)
);

-- Characters and voices usable by gemini-omni (SPEC.md 4.10), created by operators.
CREATE TABLE assets (
  id          bigserial PRIMARY KEY,
  account_id  bigint NOT NULL REFERENCES accounts(id),
  kind        text NOT NULL CHECK (kind IN ('character', 'voice')),
  name        text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX assets_account ON assets (account_id, kind, id);
