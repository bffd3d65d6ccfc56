-- Priced server tools in a generation (SPEC §21): each tool the answer used, its uses and their
-- cost (part of `total_cost_micros`), as JSON `[{"tool": "web_search", "uses": 2, "cost_micros":
-- 20000}]`; NULL for the generations that used none.
ALTER TABLE generations ADD COLUMN server_tools_json TEXT;
