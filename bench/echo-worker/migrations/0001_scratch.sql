-- Scratch tables for the echo worker's /bg and /fg paths: the shape of Switchyard's per-request
-- writes (a hold, then a settlement with ledger, generation and attempt rows), nothing more.
CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER NOT NULL DEFAULT 0, held INTEGER NOT NULL DEFAULT 0);
CREATE TABLE keys (id TEXT PRIMARY KEY, spent INTEGER NOT NULL DEFAULT 0);
CREATE TABLE holds (generation_id TEXT PRIMARY KEY, account_id TEXT NOT NULL, amount INTEGER NOT NULL, state TEXT NOT NULL, created_at INTEGER NOT NULL);
CREATE TABLE ledger (id INTEGER PRIMARY KEY AUTOINCREMENT, account_id TEXT NOT NULL, amount INTEGER NOT NULL, generation_id TEXT, created_at INTEGER NOT NULL);
CREATE TABLE generations (id TEXT PRIMARY KEY, account_id TEXT NOT NULL, model TEXT NOT NULL, outcome TEXT NOT NULL, cost INTEGER NOT NULL, created_at INTEGER NOT NULL);
CREATE TABLE attempts (generation_id TEXT NOT NULL, ordinal INTEGER NOT NULL, route TEXT NOT NULL, outcome TEXT NOT NULL, PRIMARY KEY (generation_id, ordinal));
INSERT INTO accounts (id, balance) VALUES ('a', 1000000000);
INSERT INTO keys (id) VALUES ('k');
