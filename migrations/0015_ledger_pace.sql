-- A ledger's pace (SPEC §22): how many settlements it has taken, ever. Every settlement batch adds
-- its count and reads the total back; every read of an account's balance reads it too. An isolate
-- turns two reads into the ledger's rate across all isolates, and a busy ledger gets desks
-- (Durable Objects gathering its settlements and fast holds before it). One row per database.
CREATE TABLE ledger_pace (
  id                INTEGER PRIMARY KEY CHECK (id = 0),
  settlements_total INTEGER NOT NULL DEFAULT 0
);
INSERT INTO ledger_pace (id, settlements_total) VALUES (0, 0);
