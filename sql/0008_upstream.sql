-- Real upstream providers (issue 11, DESIGN.md 5 and 7 "Providers"): per job the route used,
-- the upstream handle and when the provider got the job; the upstream status history for the
-- operator; callbacks find their job by (provider, provider_job_id).
ALTER TABLE jobs ADD COLUMN route text;
ALTER TABLE jobs ADD COLUMN upstream jsonb;
ALTER TABLE jobs ADD COLUMN submitted_at timestamptz;
CREATE INDEX jobs_upstream_id ON jobs (provider, provider_job_id) WHERE provider_job_id IS NOT NULL;

-- One row per upstream state change seen (submission, poll, callback, cancel attempt, deadline,
-- late success after a refund, refused route, stored result).
CREATE TABLE job_upstream_events (
  id       bigserial PRIMARY KEY,
  job_id   text NOT NULL REFERENCES jobs(id),
  at       timestamptz NOT NULL DEFAULT now(),
  source   text NOT NULL CHECK (source IN ('submit', 'refused', 'poll', 'callback', 'cancel', 'deadline', 'late', 'stored', 'store_failed')),
  route    text,
  state    text NOT NULL,
  detail   jsonb
);
CREATE INDEX job_upstream_events_job ON job_upstream_events (job_id, id);
