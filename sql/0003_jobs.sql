-- Jobs, their library items and batch replays (SPEC.md sections 2.1-2.4, 3, 4.3-4.9).

-- Videos made before the first purchase (free trial: one video, SPEC.md 1.8).
ALTER TABLE accounts ADD COLUMN free_videos_used integer NOT NULL DEFAULT 0;

CREATE TABLE jobs (
  id                 text PRIMARY KEY,
  account_id         bigint NOT NULL REFERENCES accounts(id),
  key_id             bigint,
  type               text NOT NULL CHECK (type IN ('video', 'image', 'audio', 'extend')),
  model              text NOT NULL,
  status             text NOT NULL CHECK (status IN ('queued', 'submitted', 'processing', 'completed', 'failed', 'cancelled')),
  prompt             text,
  request            jsonb NOT NULL,
  progress           integer NOT NULL DEFAULT 0 CHECK (progress BETWEEN 0 AND 100),
  credits_charged    integer NOT NULL CHECK (credits_charged >= 0),
  credits_refunded   integer NOT NULL DEFAULT 0 CHECK (credits_refunded >= 0 AND credits_refunded <= credits_charged),
  estimated_seconds  integer NOT NULL,
  result_url         text,
  error_message      text,
  content_policy_violation boolean NOT NULL DEFAULT false,
  provider           text NOT NULL,
  provider_job_id    text,
  idempotency_key    text,
  request_hash       text,
  source_job_id      text REFERENCES jobs(id),
  free_trial         boolean NOT NULL DEFAULT false,
  deadline_at        timestamptz NOT NULL,
  created_at         timestamptz NOT NULL DEFAULT now(),
  updated_at         timestamptz NOT NULL DEFAULT now(),
  completed_at       timestamptz
);
CREATE UNIQUE INDEX jobs_idempotency ON jobs (account_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX jobs_account_created ON jobs (account_id, created_at DESC, id DESC);
CREATE INDEX jobs_active ON jobs (account_id) WHERE status IN ('queued', 'submitted', 'processing');

CREATE TABLE videos (
  id                     bigserial PRIMARY KEY,
  account_id             bigint NOT NULL REFERENCES accounts(id),
  job_id                 text UNIQUE REFERENCES jobs(id),
  prompt                 text,
  model                  text,
  model_id               text,
  aspect_ratio           text,
  video_url              text NOT NULL,
  embed_url              text,
  thumbnail_url          text,
  extended_from_video_id bigint REFERENCES videos(id),
  created_at             timestamptz NOT NULL DEFAULT now(),
  completed_at           timestamptz
);
CREATE INDEX videos_account ON videos (account_id, created_at DESC, id DESC);

CREATE TABLE images (
  id           bigserial PRIMARY KEY,
  account_id   bigint NOT NULL REFERENCES accounts(id),
  job_id       text UNIQUE REFERENCES jobs(id),
  prompt       text,
  model        text,
  model_id     text,
  image_url    text NOT NULL,
  is_favorite  boolean NOT NULL DEFAULT false,
  created_at   timestamptz NOT NULL DEFAULT now(),
  completed_at timestamptz
);
CREATE INDEX images_account ON images (account_id, created_at DESC, id DESC);

-- A batch answer is remembered under its Idempotency-Key and replayed whole.
CREATE TABLE batches (
  id              bigserial PRIMARY KEY,
  account_id      bigint NOT NULL REFERENCES accounts(id),
  idempotency_key text NOT NULL,
  request_hash    text NOT NULL,
  response        jsonb NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT now(),
  UNIQUE (account_id, idempotency_key)
);
