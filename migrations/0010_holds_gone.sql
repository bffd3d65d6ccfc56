-- Holds live only while they hold (SPEC §22): settlement deletes its hold in the same transaction
-- that charges it, so the table keeps only open holds and expired ones awaiting their settlement.
-- What proves a generation settled, once its hold is gone, is its charge in the ledger and its
-- generation row: a hold row is never written again for a generation that has either.
DELETE FROM holds WHERE state = 'settled';
-- One charge per generation, by construction; also the lookup the hold's guard makes.
CREATE UNIQUE INDEX ledger_generation ON ledger (generation_id) WHERE generation_id IS NOT NULL;
