-- Reap: up to 1000 runs whose lease expired (a preempted or vanished worker: no one's fault that
-- the run can be blamed for), requeued with the attempt not spent, or failed once a run has been
-- preempted $1 times (docs/server.md#failures). SKIP LOCKED: a run a worker is heartbeating right
-- now is left for the next pass, and two replicas reaping at once split the expired runs between
-- them. With worker $2 (0: none), instead the leases that worker still holds, expired or not: it
-- registered again as a new process, so the process that held them is gone (a preemption too,
-- unless its crash was reported first); those rows are waited for, not skipped.
WITH expired AS (
  SELECT id FROM runs WHERE state IN ('leased', 'running') AND $2::bigint = 0
    AND lease_expires_at < now()
  ORDER BY lease_expires_at LIMIT 1000 FOR UPDATE SKIP LOCKED),
dead AS (
  SELECT id FROM runs WHERE state IN ('leased', 'running') AND $2::bigint <> 0
    AND worker_id = $2::bigint
  FOR UPDATE),
gone AS (SELECT id FROM expired UNION ALL SELECT id FROM dead),
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
  FROM gone WHERE r.id = gone.id
  RETURNING r.id, r.sweep_id, r.attempt, r.state, r.device, r.error, r.worker_id),
e AS (INSERT INTO run_events (run_id, kind, attempt, worker, message)
  SELECT upd.id, 'preempted', upd.attempt,
    coalesce((SELECT name FROM workers WHERE id = upd.worker_id), ''),
    CASE WHEN upd.state = 'failed' THEN upd.error WHEN $2::bigint <> 0 THEN
      'its worker restarted (the process that held the lease is gone); requeued'
      ELSE 'lease expired (worker stopped heartbeating); requeued' END FROM upd),
w AS (UPDATE workers SET current_run_id = NULL
  WHERE current_run_id IN (SELECT id FROM upd))
SELECT id, sweep_id, state, device FROM upd
