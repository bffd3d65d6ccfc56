-- Which route produced a Responses answer (SPEC §17): a later request naming it as
-- `previous_response_id` goes only to that route, the one upstream that keeps its state.
ALTER TABLE generations ADD COLUMN upstream_response_id TEXT;
CREATE INDEX generations_by_response ON generations (account_id, upstream_response_id)
  WHERE upstream_response_id IS NOT NULL;
