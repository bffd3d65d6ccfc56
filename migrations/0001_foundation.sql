-- Foundation schema: the catalog, accounts, API keys and the money ledger.
-- Money is integer micro-dollars (1 USD = 1 000 000), within ±2^53 so D1's number binding is exact.

-- The whole catalog as one validated JSON document: replaced atomically, changed entry by entry
-- with a version check (compare-and-swap) so two admins never lose each other's change.
CREATE TABLE catalog (
  id         INTEGER PRIMARY KEY CHECK (id = 1),
  doc        TEXT    NOT NULL,
  version    INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);

CREATE TABLE accounts (
  id              TEXT    PRIMARY KEY,
  name            TEXT,
  balance_micros  INTEGER NOT NULL DEFAULT 0,
  held_micros     INTEGER NOT NULL DEFAULT 0,
  allow_fallbacks INTEGER,
  created_at      INTEGER NOT NULL
);

-- Keys are stored only as the SHA-256 hex of the plaintext. A deleted key keeps its row (its spend
-- history) with revoked_at set.
CREATE TABLE api_keys (
  id                 TEXT    PRIMARY KEY,
  account_id         TEXT    NOT NULL REFERENCES accounts(id),
  key_hash           TEXT    NOT NULL UNIQUE,
  name               TEXT,
  rpm                INTEGER,
  max_concurrent     INTEGER,
  spend_limit_micros INTEGER,
  allow_fallbacks    INTEGER,
  spent_micros       INTEGER NOT NULL DEFAULT 0,
  created_at         INTEGER NOT NULL,
  revoked_at         INTEGER
);

-- Every movement of money: credits in, charges out. balance = Σ credits − Σ charges.
CREATE TABLE ledger (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  account_id    TEXT    NOT NULL REFERENCES accounts(id),
  kind          TEXT    NOT NULL CHECK (kind IN ('credit', 'charge')),
  amount_micros INTEGER NOT NULL,
  generation_id TEXT,
  key_id        TEXT,
  estimated     INTEGER NOT NULL DEFAULT 0,
  created_at    INTEGER NOT NULL
);
CREATE INDEX ledger_account ON ledger(account_id);
