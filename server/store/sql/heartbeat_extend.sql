-- Heartbeat by the lease holder: running, lease extended by $2 seconds, step $3 (never beyond
-- the run's own steps), throughput $4.
UPDATE runs SET state = 'running',
  lease_expires_at = now() + make_interval(secs => $2), step = greatest(step, least($3, total_steps)),
  tokens_per_second = $4
WHERE id = $1 RETURNING extract(epoch from lease_expires_at) AS expires_at,
  sweep_id
