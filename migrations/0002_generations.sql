-- The attempts log (SPEC §14): one generation per request, one row per attempt at a route.
CREATE TABLE generations (
  id               TEXT    PRIMARY KEY,
  account_id       TEXT    NOT NULL,
  key_id           TEXT    NOT NULL,
  model            TEXT    NOT NULL,
  api              TEXT    NOT NULL,
  stream           INTEGER NOT NULL,
  outcome          TEXT    NOT NULL,  -- answered | broken | failed
  route            TEXT,
  provider         TEXT,
  input_tokens     INTEGER,
  output_tokens    INTEGER,
  estimated        INTEGER NOT NULL DEFAULT 0,
  delivered_output INTEGER NOT NULL DEFAULT 0,
  error_code       TEXT,
  total_cost_micros INTEGER NOT NULL DEFAULT 0,
  created_at       INTEGER NOT NULL,
  duration_ms      INTEGER NOT NULL
);
CREATE INDEX generations_account ON generations(account_id, created_at);

CREATE TABLE attempts (
  generation_id    TEXT    NOT NULL,
  ordinal          INTEGER NOT NULL,
  route            TEXT    NOT NULL,
  provider         TEXT    NOT NULL,
  outcome          TEXT    NOT NULL,  -- answered | failed
  failure_class    TEXT,
  http_status      INTEGER,
  ttfb_ms          INTEGER,
  duration_ms      INTEGER NOT NULL,
  delivered_output INTEGER NOT NULL DEFAULT 0,
  cost_micros      INTEGER NOT NULL DEFAULT 0,
  extra_try        INTEGER NOT NULL DEFAULT 0,
  malformed_events INTEGER NOT NULL DEFAULT 0,  -- dropped after commit (SPEC §7)
  message          TEXT,
  PRIMARY KEY (generation_id, ordinal)
);
