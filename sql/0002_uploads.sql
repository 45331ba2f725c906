-- Uploads (SPEC.md 4.14, DESIGN.md section 6): one row per stored upload. Video uploads
-- expire (expires_at about 90 days out) and src/storage/sweeper.ts deletes the file and the
-- row; image and audio uploads are durable (expires_at NULL).
CREATE TABLE uploads (
  id            bigserial PRIMARY KEY,
  account_id    bigint NOT NULL REFERENCES accounts(id),
  key           text NOT NULL UNIQUE,
  kind          text NOT NULL CHECK (kind IN ('image', 'audio', 'video')),
  size          bigint NOT NULL CHECK (size >= 0),
  content_type  text NOT NULL,
  created_at    timestamptz NOT NULL DEFAULT now(),
  expires_at    timestamptz
);
CREATE INDEX uploads_account ON uploads (account_id, id);
CREATE INDEX uploads_expiry ON uploads (expires_at) WHERE expires_at IS NOT NULL;
