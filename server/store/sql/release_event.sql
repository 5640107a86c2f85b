-- After release: the event (attempt $2, reason $3), and worker $4 no longer on run $1.
WITH e AS (INSERT INTO run_events (run_id, kind, attempt, message)
  VALUES ($1, 'released', $2, $3)),
w AS (UPDATE workers SET current_run_id = NULL WHERE id = $4
  AND current_run_id = $1)
SELECT 1
