-- The work sweep $1 has left, by run shape (device, dtype, FLOPs per token, FLOPs per run): queued
-- runs, the unfinished fraction of running ones, and how many unfinished runs have no known size
-- (submitted before sizes were recorded).
SELECT device, coalesce(dtype, 'float32'), coalesce(flops_per_token, 0), coalesce(flops, 0),
  count(*) FILTER (WHERE state = 'queued'),
  coalesce(sum(greatest(0, 1 - step::float8 / greatest(total_steps, 1)))
    FILTER (WHERE state IN ('leased', 'running')), 0),
  count(*) FILTER (WHERE flops IS NULL)
FROM runs WHERE sweep_id = $1 AND state IN ('queued', 'leased', 'running')
GROUP BY 1, 2, 3, 4
