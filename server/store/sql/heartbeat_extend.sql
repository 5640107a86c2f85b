-- Heartbeat by the lease holder: running, lease extended by $2 seconds, step $3, throughput $4.
UPDATE runs SET state = 'running',
  lease_expires_at = now() + make_interval(secs => $2), step = greatest(step, $3),
  tokens_per_second = $4
WHERE id = $1 RETURNING extract(epoch from lease_expires_at) AS expires_at,
  sweep_id
