-- Reap: up to 1000 runs whose lease expired (a preempted or vanished worker: no one's fault that
-- the run can be blamed for), requeued with the attempt not spent, or failed once a run has been
-- preempted $1 times (docs/server.md#failures). SKIP LOCKED: a run a worker is heartbeating right
-- now is left for the next pass, and two replicas reaping at once split the expired runs between
-- them.
WITH expired AS (
  SELECT id FROM runs WHERE state IN ('leased', 'running') AND lease_expires_at < now()
  ORDER BY lease_expires_at LIMIT 1000 FOR UPDATE SKIP LOCKED),
upd AS (
  UPDATE runs r SET
    preemptions = r.preemptions + 1,
    state = CASE WHEN r.preemptions + 1 >= $1 THEN 'failed' ELSE 'queued' END,
    max_attempts = CASE WHEN r.preemptions + 1 >= $1 THEN r.max_attempts
      ELSE r.max_attempts + 1 END,
    error = CASE WHEN r.preemptions + 1 >= $1 THEN
      format('lease expired %s times (preempted or vanished workers); the last on attempt %s',
             r.preemptions + 1, r.attempt) ELSE r.error END,
    finished_at = CASE WHEN r.preemptions + 1 >= $1 THEN now() END,
    lease_expires_at = NULL
  FROM expired WHERE r.id = expired.id
  RETURNING r.id, r.sweep_id, r.attempt, r.state, r.device, r.error, r.worker_id),
e AS (INSERT INTO run_events (run_id, kind, attempt, worker, message)
  SELECT upd.id, 'preempted', upd.attempt,
    coalesce((SELECT name FROM workers WHERE id = upd.worker_id), ''),
    CASE WHEN upd.state = 'failed' THEN upd.error
      ELSE 'lease expired (worker stopped heartbeating); requeued' END FROM upd),
w AS (UPDATE workers SET current_run_id = NULL
  WHERE current_run_id IN (SELECT id FROM upd))
SELECT id, sweep_id, state, device FROM upd
