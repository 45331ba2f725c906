-- The completion of a group commit is one statement (src/db/ledger.ts completeJobs, issue 12):
-- its outbox INSERT runs even when none of its jobs has a webhook, inserting no row. The
-- statement-level trigger of 0005 would then wake every delivery pool for nothing; it now
-- notifies only when the statement inserted rows (a transition table holds them).
DROP TRIGGER webhook_deliveries_notify ON webhook_deliveries;

CREATE OR REPLACE FUNCTION webhook_deliveries_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM inserted_deliveries) THEN
    PERFORM pg_notify('webhook_deliveries', '');
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER webhook_deliveries_notify AFTER INSERT ON webhook_deliveries
  REFERENCING NEW TABLE AS inserted_deliveries
  FOR EACH STATEMENT EXECUTE FUNCTION webhook_deliveries_notify();
