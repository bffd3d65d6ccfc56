-- The attempts of a generation live in the generation row as a JSON array: settlement writes one
-- row instead of one per attempt (fewer D1 statements per request, SPEC §11 "one D1 batch").
ALTER TABLE generations ADD COLUMN attempts_json TEXT NOT NULL DEFAULT '[]';
DROP TABLE attempts;
