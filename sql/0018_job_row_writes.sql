-- Less PostgreSQL work per job (docs/decisions.md "PostgreSQL CPU per job").
--
-- Room on each jobs page for updated row versions (fillfactor 50: at 80 only about a quarter
-- of the first updates of freshly inserted rows found room on their page, at 50 all did), and
-- no index that a running job's writes change: the set of running jobs was a partial index over
-- status IN ('queued', 'submitted', 'processing'), so every status change (submitted to
-- processing) was a new row version entered in every index of jobs, and full pages forced the
-- same on every progress flush and claim. The running set is now the rows without
-- completed_at, which is set exactly when a job becomes terminal (completion, failure,
-- cancellation; a job born completed is completed in its creation's transaction): a status
-- change, a progress write or a claim touches no indexed column and, with room on its page, is a HOT update
-- (no index entry). Queries over running jobs say `completed_at IS NULL` as well as the status.
ALTER TABLE jobs SET (fillfactor = 50);
CREATE INDEX jobs_running ON jobs (account_id) WHERE completed_at IS NULL;
DROP INDEX IF EXISTS jobs_active;

-- The foreign keys of the rows a completion writes cost each of them an SPI lookup of the
-- referenced row with a KEY SHARE lock, taken on the account row that concurrent charges are
-- updating (a multixact) and on the webhook row every completion of the account shares. Each
-- of these rows is inserted by the statement that selects its references: library rows and
-- outbox rows from the jobs the same statement completed (their account and id), outbox rows
-- of registered webhooks from a join with webhooks, upstream events for a job held in memory or
-- just looked up. Jobs, accounts and webhooks are never deleted (webhooks are soft-deleted), as
-- sql/0011_creation_writes.sql already relies on for jobs and credit_entries.
ALTER TABLE images DROP CONSTRAINT IF EXISTS images_account_id_fkey, DROP CONSTRAINT IF EXISTS images_job_id_fkey;
ALTER TABLE videos DROP CONSTRAINT IF EXISTS videos_account_id_fkey, DROP CONSTRAINT IF EXISTS videos_job_id_fkey;
ALTER TABLE webhook_deliveries DROP CONSTRAINT IF EXISTS webhook_deliveries_account_id_fkey,
  DROP CONSTRAINT IF EXISTS webhook_deliveries_job_id_fkey, DROP CONSTRAINT IF EXISTS webhook_deliveries_webhook_id_fkey;
ALTER TABLE job_upstream_events DROP CONSTRAINT IF EXISTS job_upstream_events_job_id_fkey;

-- Nothing reads images by job: its unique index on job_id only guarded one library row per job,
-- which the completion statement already ensures (it inserts the image for the jobs its own
-- UPDATE moved to completed, which happens once per job). Each completion paid a random-key
-- btree insert for it. (videos keeps its index: an extension looks up the video it extends.)
ALTER TABLE images DROP CONSTRAINT IF EXISTS images_job_id_key;
