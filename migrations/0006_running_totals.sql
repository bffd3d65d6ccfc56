-- Running totals per account, so GET /v1/credits reads one row instead of summing the ledger
-- (SPEC §15: O(1) in D1). Kept by the same statements that write the ledger.
ALTER TABLE accounts ADD COLUMN credits_total_micros INTEGER NOT NULL DEFAULT 0;
ALTER TABLE accounts ADD COLUMN charges_total_micros INTEGER NOT NULL DEFAULT 0;
UPDATE accounts SET
  credits_total_micros = (SELECT COALESCE(SUM(amount_micros), 0) FROM ledger WHERE account_id = accounts.id AND kind = 'credit'),
  charges_total_micros = (SELECT COALESCE(SUM(amount_micros), 0) FROM ledger WHERE account_id = accounts.id AND kind = 'charge');
-- An account's and a key's open holds, found without scanning every open hold.
CREATE INDEX holds_account_open ON holds(account_id, state);
CREATE INDEX holds_key_open ON holds(key_id, state);
