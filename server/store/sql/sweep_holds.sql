-- What holds sweep $1 back ($2 the lease period in seconds), for GetSweep's counts and ETA
-- (docs/server.md#workers-states-and-benching-read-side):
-- - its queued runs no live worker can hold: an estimate (memory_bytes > 0) above the largest
--   device memory per slot of the workers not stopped and seen within a lease period (benched
--   ones included: they come back). 0 when none is live, or one reported no memory (it may lease
--   any run). Read through runs_unfinished only when some limit applies;
-- - the attempts its runs lost to lease expiry (preemptions) and to worker-side failures;
-- - its runs whose lease is held by a worker stopped or silent for over a lease period (lost):
--   they make no progress until the reaper requeues them (runs_held_by_sweep).
WITH cap AS (
  SELECT CASE WHEN count(*) = 0 OR bool_or(memory_per_slot <= 0) THEN NULL
    ELSE max(memory_per_slot) END AS bytes
  FROM workers
  WHERE stopped_at IS NULL AND last_seen_at >= now() - make_interval(secs => $2::float8))
SELECT CASE WHEN (SELECT bytes FROM cap) IS NULL THEN 0 ELSE (
    SELECT count(*) FROM runs r WHERE r.sweep_id = $1 AND r.state = 'queued'
    AND r.memory_bytes > (SELECT bytes FROM cap)) END AS unfittable,
  coalesce(sum(r.preemptions), 0)::bigint AS preemptions,
  coalesce(sum(r.worker_faults), 0)::bigint AS worker_faults,
  (SELECT count(*) FROM runs h JOIN workers w ON w.id = h.worker_id
    WHERE h.sweep_id = $1 AND h.state IN ('leased', 'running') AND (w.stopped_at IS NOT NULL
    OR w.last_seen_at < now() - make_interval(secs => $2::float8))) AS lost_in_flight
FROM runs r WHERE r.sweep_id = $1
