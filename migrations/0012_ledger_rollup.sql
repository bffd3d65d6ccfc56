-- Per-request charges do not stay in the ledger forever (SPEC §22): after a week each is added to
-- its hour's total per (account, key, model) and deleted; after five weeks the hours become days.
-- Balances and running totals (accounts, api_keys) are exact throughout: they never read the
-- ledger. Credits stay as they are (one row per top-up).
CREATE TABLE ledger_rollup (
  account_id        TEXT    NOT NULL,
  key_id            TEXT    NOT NULL DEFAULT '',
  model             TEXT    NOT NULL DEFAULT '',
  period            TEXT    NOT NULL CHECK (period IN ('hour', 'day')),
  period_start      INTEGER NOT NULL,
  amount_micros     INTEGER NOT NULL,
  charges           INTEGER NOT NULL,
  estimated_charges INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (account_id, key_id, model, period, period_start)
);
CREATE INDEX ledger_rollup_period ON ledger_rollup(period, period_start);
CREATE INDEX ledger_charge_age ON ledger(kind, created_at);
