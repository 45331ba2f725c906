-- Job ownership by shard lease (docs/decisions.md "Shard leases"): each shard of a live node
-- renews ONE row here every LEASE_MS / 3, instead of an UPDATE of every job it runs (a shard
-- holding 50,000 queued jobs spent 1-2.6 s of PostgreSQL time per 10 s renewing their rows).
-- A job's owner is alive while the row of (its owner, its account's shard) is unexpired;
-- jobs.lease_until stays the grace period of a job just created or claimed.
CREATE TABLE IF NOT EXISTS shard_leases (
  node        text NOT NULL,
  shard       int NOT NULL,
  shards      int NOT NULL,
  lease_until timestamptz NOT NULL,
  PRIMARY KEY (node, shard)
);
