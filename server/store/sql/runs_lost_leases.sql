-- Per sweep, its runs whose lease is held by a worker stopped or silent for over $1 seconds (the
-- lease period: lost): they make no progress until the reaper requeues them. Every held run,
-- through runs_leases (a few rows however many runs wait queued): ListSweeps' ETA.
SELECT r.sweep_id, count(*) AS lost FROM runs r JOIN workers w ON w.id = r.worker_id
WHERE r.state IN ('leased', 'running') AND (w.stopped_at IS NOT NULL
  OR w.last_seen_at < now() - make_interval(secs => $1::float8))
GROUP BY r.sweep_id
