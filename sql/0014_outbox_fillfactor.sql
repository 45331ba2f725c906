-- Room on each outbox page for the claim's new row version (docs/decisions.md "Outbox
-- fillfactor"): a delivery's claim changes only claimed_until, which no index covers, so with
-- free space on the page PostgreSQL updates it in place (a HOT update: no new entry in the
-- three indexes). Pages filled to 100% by the completions' INSERTs forced every claim to write
-- its version elsewhere and index it three times.
ALTER TABLE webhook_deliveries SET (fillfactor = 50);
