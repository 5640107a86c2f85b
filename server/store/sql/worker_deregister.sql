-- Stops worker $1 if registered with token $2. Returns its id when it was.
UPDATE workers SET stopped_at = now(), last_seen_at = now(),
  current_run_id = NULL WHERE id = $1
  AND token_id IS NOT DISTINCT FROM $2 RETURNING id
