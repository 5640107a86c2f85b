-- Pruning: sweep $1's queued runs $2 (never requeued by a user) skipped with reasons $3. Returns
-- the ids skipped.
WITH u AS (SELECT * FROM unnest($2::bigint[], $3::text[]) AS u(id, reason)),
s AS (UPDATE runs r SET state = 'skipped', error = u.reason, finished_at = now()
  FROM u WHERE r.id = u.id AND r.sweep_id = $1 AND r.state = 'queued'
  AND NOT EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = r.id
    AND e.kind = 'requeued')
  RETURNING r.id, r.attempt, u.reason),
e AS (INSERT INTO run_events (run_id, kind, attempt, message)
  SELECT id, 'skipped', attempt, reason FROM s)
SELECT id FROM s
