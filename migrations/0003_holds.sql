-- Holds (SPEC §11): the most a request may cost, set aside before its first attempt and settled
-- to what was delivered. state: open → settled, or open → expired (swept by the cron) → settled.
CREATE TABLE holds (
  generation_id  TEXT    PRIMARY KEY,
  account_id     TEXT    NOT NULL REFERENCES accounts(id),
  key_id         TEXT    NOT NULL,
  amount_micros  INTEGER NOT NULL,
  path           TEXT    NOT NULL,  -- fast | awaited
  state          TEXT    NOT NULL CHECK (state IN ('open', 'expired', 'settled')),
  charged_micros INTEGER,
  created_at     INTEGER NOT NULL,
  expires_at     INTEGER NOT NULL,
  settled_at     INTEGER
);
CREATE INDEX holds_open ON holds(state, expires_at);

ALTER TABLE generations ADD COLUMN hold_path TEXT;
