-- Audit of failed and throttled logins (issue 15 point 5). Kept for the operator; the throttle
-- itself counts in memory or Redis, never here. email is stored as typed (lower-cased).
CREATE TABLE login_attempts (
  id bigserial PRIMARY KEY,
  at timestamptz NOT NULL DEFAULT now(),
  email text NOT NULL,
  account_id bigint,
  ip text NOT NULL,
  outcome text NOT NULL CHECK (outcome IN ('failure', 'throttled'))
);
CREATE INDEX login_attempts_email_at ON login_attempts (email, at DESC);
CREATE INDEX login_attempts_ip_at ON login_attempts (ip, at DESC);
