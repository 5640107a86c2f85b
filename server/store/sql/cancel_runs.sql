-- Cancel: sweep $1's unfinished runs (those in $2; all when $2 is empty). Returns their ids.
WITH c AS (UPDATE runs SET state = 'cancelled', finished_at = now(),
  lease_expires_at = NULL WHERE sweep_id = $1 AND state IN ('queued', 'leased', 'running')
  AND (cardinality($2::bigint[]) = 0 OR id = ANY($2::bigint[]))
  RETURNING id, attempt),
e AS (INSERT INTO run_events (run_id, kind, attempt, message)
  SELECT id, 'cancelled', attempt, 'cancelled by user' FROM c)
SELECT id FROM c
