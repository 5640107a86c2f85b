-- Budget keeper: the next $2 runs of sweep $1 in queue order, by shape (device, dtype, FLOPs per
-- token, FLOPs per run; 0 when unknown), and how many base-grid runs are queued in all.
SELECT device, coalesce(dtype, 'float32') AS dtype,
  coalesce(flops_per_token, 0) AS flops_per_token, coalesce(flops, 0) AS flops_per_run
FROM runs WHERE sweep_id = $1 AND state = 'queued'
ORDER BY priority DESC, order_index LIMIT $2
