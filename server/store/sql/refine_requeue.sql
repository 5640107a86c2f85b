-- skipped -> queued: sweep $1's skipped runs $2, with reasons $3 for the `unskipped` event.
-- Returns (id, device) of each.
WITH u AS (SELECT * FROM unnest($2::bigint[], $3::text[]) AS u(id, reason)),
q AS (UPDATE runs r SET state = 'queued', error = '', finished_at = NULL
  FROM u WHERE r.id = u.id AND r.sweep_id = $1 AND r.state = 'skipped'
  RETURNING r.id, r.attempt, r.device, u.reason),
e AS (INSERT INTO run_events (run_id, kind, attempt, message)
  SELECT id, 'unskipped', attempt, reason FROM q)
SELECT id, device FROM q
