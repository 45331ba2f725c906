-- Usage summaries (issue 6, DESIGN.md 7: GET /v1/usage/summary). The summary reads the
-- usage_daily rollup for requests (never request_log), and one account's ledger and jobs by
-- time range. jobs already has jobs_account_created (account_id, created_at DESC, id DESC);
-- the ledger was only indexed by (account_id, id). INCLUDE lets the charge/refund sums run as
-- index-only scans.
CREATE INDEX credit_entries_account_created ON credit_entries (account_id, created_at) INCLUDE (kind, delta);
