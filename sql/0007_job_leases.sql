-- Job ownership across nodes (DESIGN.md section 4): the node running a job holds a lease and
-- renews it; jobs of a node that stopped renewing are claimed by another with SKIP LOCKED.
ALTER TABLE jobs ADD COLUMN owner text;
ALTER TABLE jobs ADD COLUMN lease_until timestamptz;
CREATE INDEX jobs_lease ON jobs (lease_until) WHERE status IN ('queued', 'submitted', 'processing');
