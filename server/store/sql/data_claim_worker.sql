-- Whether worker $1, registered with token $2, has stopped (no row: not the caller's worker).
SELECT stopped_at IS NOT NULL AS stopped FROM workers WHERE id = $1 AND
  token_id IS NOT DISTINCT FROM $2
