-- What a generation's delivered usage cost beyond its hold (an upstream that ignored the output
-- limit, or surcharges): recorded, never charged (SPEC §11: the hold bounds the charge).
ALTER TABLE generations ADD COLUMN overrun_micros INTEGER NOT NULL DEFAULT 0;
