-- Wakes every node's delivery pool (LISTEN webhook_deliveries, src/actors/delivery-worker.ts)
-- when outbox rows commit, so a terminal job's webhook leaves at once instead of at the next
-- poll. NOTIFY is sent only on COMMIT and identical ones in a transaction collapse into one;
-- only transactions that insert outbox rows pay for it (statement-level trigger).
CREATE FUNCTION webhook_deliveries_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('webhook_deliveries', '');
  RETURN NULL;
END
$$;

CREATE TRIGGER webhook_deliveries_notify AFTER INSERT ON webhook_deliveries
  FOR EACH STATEMENT EXECUTE FUNCTION webhook_deliveries_notify();
