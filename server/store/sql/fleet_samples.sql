-- The fleet's measured speed: the newest $1 finished runs of known size whose attempts all ran
-- on one device class. Per run: the class, dtype, FLOPs per token, model FLOPs trained (the steps
-- it did of its total) and the device-seconds charged for all its attempts.
SELECT u.device_class, coalesce(r.dtype, 'float32') AS dtype, r.flops_per_token,
  r.flops * least(1, coalesce((r.result->>'steps_done')::float8, r.step::float8)
                     / greatest(r.total_steps, 1)) AS flops,
  u.device_seconds
FROM (SELECT id, dtype, flops, flops_per_token, result, step, total_steps FROM runs
      WHERE state IN ('succeeded', 'diverged') AND flops IS NOT NULL
      ORDER BY finished_at DESC LIMIT $1) r,
LATERAL (SELECT min(device_class) AS device_class, count(DISTINCT device_class) AS classes,
  sum(extract(epoch from ended_at - started_at) * share) AS device_seconds
  FROM run_usage WHERE run_id = r.id AND ended_at IS NOT NULL) u
WHERE u.classes = 1 AND u.device_seconds > 0
