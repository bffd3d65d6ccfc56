-- Ledgers (SPEC §22): an account's money — balance, holds, ledger, running totals, its keys and
-- the records left in D1 — lives in one of several D1 databases, its ledger: the home database
-- (`DB`, ledger 0) or `LEDGER_<n>`. Every database gets every migration (the same schema), so any
-- of them can be a ledger; the home database alone keeps the catalog, the platform's checks and
-- this directory, which says where each account was placed when it was created.
CREATE TABLE account_ledgers (
  account_id TEXT    PRIMARY KEY,
  ledger     INTEGER NOT NULL
) WITHOUT ROWID;
-- Every account from before is on the home database: that is where its rows are.
INSERT INTO account_ledgers (account_id, ledger) SELECT id, 0 FROM accounts;
