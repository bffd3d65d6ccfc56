-- What the platform itself spends upstream (SPEC §8a): one row per verification check, charged to
-- no customer. `passed` is 1 or 0; `reason` is `answered` or why the answer was not one.
CREATE TABLE platform_ledger (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  kind          TEXT    NOT NULL CHECK (kind IN ('route_check')),
  model         TEXT    NOT NULL,
  route         TEXT    NOT NULL,
  provider      TEXT    NOT NULL,
  check_kind    TEXT    NOT NULL,  -- cooldown | idle | confirm | recheck (SPEC §8a, §8b, §18)
  passed        INTEGER NOT NULL,
  reason        TEXT    NOT NULL,
  input_tokens  INTEGER NOT NULL DEFAULT 0,
  output_tokens INTEGER NOT NULL DEFAULT 0,
  amount_micros INTEGER NOT NULL DEFAULT 0,
  duration_ms   INTEGER NOT NULL,
  created_at    INTEGER NOT NULL
);
CREATE INDEX platform_ledger_route ON platform_ledger(model, route, created_at);
