-- Reap: up to 1000 runs whose lease expired, requeued or (out of attempts) failed. SKIP LOCKED:
-- a run a worker is heartbeating right now is left for the next pass, and two replicas reaping
-- at once split the expired runs between them.
WITH expired AS (
  SELECT id FROM runs WHERE state IN ('leased', 'running') AND lease_expires_at < now()
  ORDER BY lease_expires_at LIMIT 1000 FOR UPDATE SKIP LOCKED),
upd AS (
  UPDATE runs r SET
    state = CASE WHEN r.attempt >= r.max_attempts THEN 'failed' ELSE 'queued' END,
    error = CASE WHEN r.attempt >= r.max_attempts THEN
      format('lease expired on attempt %s of %s (worker stopped heartbeating)',
             r.attempt, r.max_attempts) ELSE r.error END,
    finished_at = CASE WHEN r.attempt >= r.max_attempts THEN now() END,
    lease_expires_at = NULL
  FROM expired WHERE r.id = expired.id
  RETURNING r.id, r.sweep_id, r.attempt, r.state, r.device, r.error),
e AS (INSERT INTO run_events (run_id, kind, attempt, message)
  SELECT id, 'expired', attempt, CASE WHEN state = 'failed' THEN error
    ELSE 'lease expired; requeued' END FROM upd),
w AS (UPDATE workers SET current_run_id = NULL
  WHERE current_run_id IN (SELECT id FROM upd))
SELECT id, sweep_id, state, device FROM upd
