-- Heartbeat: worker $1, if registered with token $3, is alive and on run $2 (0: none).
UPDATE workers SET last_seen_at = now(), current_run_id = nullif($2, 0)
WHERE id = $1 AND token_id IS NOT DISTINCT FROM $3 RETURNING name
