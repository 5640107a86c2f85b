-- What holds sweep $1 back ($2 the lease period in seconds), for GetSweep's counts and ETA
-- (docs/server.md#workers-states-and-benching-read-side):
-- - its queued runs no live worker can hold: none of the workers not stopped and seen within a
--   lease period (benched ones included: they come back) both runs the run's device (its
--   device_kind, or any for a run of device auto) and has the device memory per slot for its
--   estimate (memory_bytes; a worker that reported no memory may take any run of its kind). A
--   cuda run with only cpu workers live is one of them, whatever memory those have. 0 when no
--   worker is live (the sweep is then held for that);
-- - the attempts its runs lost to lease expiry (preemptions) and to worker-side failures;
-- - its runs whose lease is held by a worker stopped or silent for over a lease period (lost):
--   they make no progress until the reaper requeues them (runs_held_by_sweep);
-- - its queued runs that wait for a worker other than the ones they faulted on
--   (fault_hold_until, migration 0030), and when the last of those holds ends (unix seconds).
WITH live AS MATERIALIZED (
  SELECT device_kind, memory_per_slot FROM workers
  WHERE stopped_at IS NULL AND last_seen_at >= now() - make_interval(secs => $2::float8))
SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM live) THEN 0 ELSE (
    SELECT count(*) FROM runs q WHERE q.sweep_id = $1 AND q.state = 'queued'
    AND NOT EXISTS (SELECT 1 FROM live l WHERE (q.device = 'auto' OR l.device_kind = q.device)
      AND (l.memory_per_slot <= 0 OR q.memory_bytes <= l.memory_per_slot))) END AS unfittable,
  coalesce(sum(r.preemptions), 0)::bigint AS preemptions,
  coalesce(sum(r.worker_faults), 0)::bigint AS worker_faults,
  (SELECT count(*) FROM runs h JOIN workers w ON w.id = h.worker_id
    WHERE h.sweep_id = $1 AND h.state IN ('leased', 'running') AND (w.stopped_at IS NOT NULL
    OR w.last_seen_at < now() - make_interval(secs => $2::float8))) AS lost_in_flight,
  count(*) FILTER (WHERE r.state = 'queued' AND r.fault_hold_until > now()
    AND cardinality(r.faulted_workers) > 0) AS fault_held,
  coalesce(extract(epoch from max(r.fault_hold_until) FILTER (WHERE r.state = 'queued'
    AND r.fault_hold_until > now() AND cardinality(r.faulted_workers) > 0)), 0) AS fault_held_until
FROM runs r WHERE r.sweep_id = $1
