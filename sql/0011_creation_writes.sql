-- Less work per created job row (issue 12, docs/decisions.md "Creation CPU").
--
-- jobs_lease indexed the same rows as jobs_active (the non-terminal jobs) and only ever served
-- as a list of them: the claim query filters on owner OR lease_until, which no index on
-- lease_until alone can answer, and jobs_active serves that scan as well. Without it a lease
-- renewal no longer has to update an index (it can be a HOT update).
DROP INDEX IF EXISTS jobs_lease;

-- The account foreign keys of jobs and credit_entries cost every inserted row a lookup of the
-- account with a row lock (an SPI query in an after-trigger): about a sixth of PostgreSQL's
-- CPU per creation. Every insert into these tables is guarded by an UPDATE of that account
-- row in the same statement or transaction (the conditional charge, applyCredit, account
-- creation), which finds no row for a missing account and writes nothing; accounts are never
-- deleted.
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_account_id_fkey;
ALTER TABLE credit_entries DROP CONSTRAINT IF EXISTS credit_entries_account_id_fkey;
