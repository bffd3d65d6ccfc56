-- Prompt caching in a generation's usage (SPEC §17): the cache reads and writes that are part of
-- `input_tokens`, each charged at its own price, and whether a reported count was more than the
-- request could cause and was cut.
ALTER TABLE generations ADD COLUMN cache_read_tokens INTEGER;
ALTER TABLE generations ADD COLUMN cache_write_tokens INTEGER;
ALTER TABLE generations ADD COLUMN cache_write_1h_tokens INTEGER;
ALTER TABLE generations ADD COLUMN usage_clamped INTEGER NOT NULL DEFAULT 0;
