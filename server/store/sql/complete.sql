-- Complete: under the fence (run $1, attempt $2, token digest $3, lease held), state $4 with
-- result $5 (JSON), error $6 and steps done $7; the event, and the worker's count. Returns the
-- run's sweep (no row: fenced off).
WITH upd AS (
  UPDATE runs SET state = $4, result = $5::jsonb, error = $6,
    finished_at = now(), lease_expires_at = NULL,
    step = greatest(step, $7)
  WHERE id = $1 AND attempt = $2 AND lease_token_sha256 = $3 AND state IN ('leased', 'running')
  RETURNING sweep_id, worker_id),
e AS (INSERT INTO run_events (run_id, kind, attempt, worker, message)
  SELECT $1, 'completed', $2,
    coalesce((SELECT name FROM workers WHERE id = upd.worker_id), ''), $4
  FROM upd),
w AS (UPDATE workers SET runs_completed = runs_completed + 1,
  current_run_id = CASE WHEN current_run_id = $1 THEN NULL
    ELSE current_run_id END
  WHERE id = (SELECT worker_id FROM upd))
SELECT sweep_id FROM upd
