-- Budget keeper: sweep $1's attempts holding a lease, with what they are charged at and how far
-- they got: class, slot share, slot price (0: unpriced), latest tokens/s, tokens left, and the
-- run's shape (device, dtype, FLOPs per token, FLOPs per run) and unfinished fraction.
SELECT u.device_class, u.share, coalesce(u.usd_per_hour, 0), coalesce(r.tokens_per_second, 0),
  greatest(0, r.total_steps - r.step)::float8
    * coalesce(r.flops / nullif(r.flops_per_token, 0), 0) / greatest(r.total_steps, 1),
  r.device, coalesce(r.dtype, 'float32'), coalesce(r.flops_per_token, 0), coalesce(r.flops, 0),
  greatest(0, 1 - r.step::float8 / greatest(r.total_steps, 1))
FROM runs r JOIN run_usage u ON u.run_id = r.id AND u.attempt = r.attempt
WHERE r.sweep_id = $1 AND r.state IN ('leased', 'running')
