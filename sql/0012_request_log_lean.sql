-- request_log is written ~1 row per request and read only by the hourly prune (by time) and by
-- operators: every index costs each row a btree insert inside the metering flush's COPY
-- (docs/decisions.md "request_log without per-row indexes"). The (account_id, at) index, which
-- nothing reads (summaries read usage_daily), and the primary key index go; `at` keeps a BRIN
-- index (rows arrive in time order), enough for the prune's range delete. The id column stays.
DROP INDEX IF EXISTS request_log_account;
DROP INDEX IF EXISTS request_log_at;
CREATE INDEX request_log_at_brin ON request_log USING brin (at);
ALTER TABLE request_log DROP CONSTRAINT IF EXISTS request_log_pkey;
