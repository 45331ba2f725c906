-- Outbox rows a node hands to its own delivery worker in memory (docs/decisions.md "Webhook
-- deliveries handed over in memory"): the completion statement inserts them already claimed
-- (claimed_until = now() + the claim lease), so no pool claims them while the node sends them,
-- and no pool needs waking for them. NOTIFY only when the statement inserted a row any pool may
-- claim now; a claimed row whose node died comes due when its lease lapses (the pools' poll).
CREATE OR REPLACE FUNCTION webhook_deliveries_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM inserted_deliveries WHERE claimed_until IS NULL OR claimed_until < now()) THEN
    PERFORM pg_notify('webhook_deliveries', '');
  END IF;
  RETURN NULL;
END
$$;
