-- Budget keeper: sweep $1's attempts holding a lease, with what they are charged at and how far
-- they got: class, slot share, slot price (0: unpriced), latest tokens/s, tokens left, and the
-- run's shape (device, dtype, FLOPs per token, FLOPs per run) and unfinished fraction. A tokens/s
-- outside 0..1e12 (NaN or infinite in an older row) reads as 0, unknown.
SELECT u.device_class, u.share, coalesce(u.usd_per_hour, 0) AS usd_per_slot_hour,
  CASE WHEN r.tokens_per_second BETWEEN 0 AND 1e12 THEN r.tokens_per_second ELSE 0 END
    AS tokens_per_second,
  greatest(0, r.total_steps - greatest(r.step, 0))::float8
    * coalesce(r.flops / nullif(r.flops_per_token, 0), 0) / greatest(r.total_steps, 1)
    AS remaining_tokens,
  r.device, coalesce(r.dtype, 'float32') AS dtype,
  coalesce(r.flops_per_token, 0) AS flops_per_token, coalesce(r.flops, 0) AS flops_per_run,
  greatest(0, 1 - r.step::float8 / greatest(r.total_steps, 1)) AS remaining_fraction
FROM runs r JOIN run_usage u ON u.run_id = r.id AND u.attempt = r.attempt
WHERE r.sweep_id = $1 AND r.state IN ('leased', 'running')
