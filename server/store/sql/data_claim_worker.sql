-- Whether worker $1, registered with token $2, has stopped (no row: not the caller's worker).
-- The row stays locked to the end of the claim's transaction, so one worker's claims are counted
-- and inserted one at a time: without it, concurrent claims each counted the others' before
-- they committed and passed the open-claim cap together.
SELECT stopped_at IS NOT NULL AS stopped FROM workers WHERE id = $1 AND
  token_id IS NOT DISTINCT FROM $2
FOR NO KEY UPDATE
