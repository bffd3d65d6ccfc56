-- Generation records leave D1 (SPEC §22): each is kept by a SQLite Durable Object of its day and
-- shard (`RECORDS`), found by its id for 31 days. The `generations` table keeps the rows written
-- before, and records a records object would not take; the cron deletes its rows 31 days old.
--
-- What the generation row also did, now done here:
-- * the ledger charge says its model (the roll-up's key) instead of joining `generations`;
ALTER TABLE ledger ADD COLUMN model TEXT;
-- * a settlement that booked no charge leaves a mark (a hold row is never written again for a
--   settled generation), deleted with the charges' roll-up after eight days — by then its hold,
--   expired for more than a week, is too old to be written at all.
CREATE TABLE settled (
  generation_id TEXT    PRIMARY KEY,
  created_at    INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX settled_age ON settled(created_at);
