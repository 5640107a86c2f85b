-- The work sweep $1 has left, by run shape (device, dtype, FLOPs per token, FLOPs per run): queued
-- runs, the unfinished fraction of running ones, and how many unfinished runs have no known size
-- (submitted before sizes were recorded). The counts come from run_counts (migration 0011); only
-- the runs in flight, which a fleet bounds, are read themselves (runs_held_by_sweep).
WITH shapes AS (
  SELECT device, coalesce(dtype, 'float32') AS dtype, coalesce(flops_per_token, 0) AS fpt,
    coalesce(flops, 0) AS flops, sum(queued) AS queued,
    sum(queued + leased + running) FILTER (WHERE flops IS NULL) AS unknown
  FROM run_counts WHERE sweep_id = $1 GROUP BY 1, 2, 3, 4
  HAVING sum(queued + leased + running) > 0),
held AS (
  SELECT device, coalesce(dtype, 'float32') AS dtype, coalesce(flops_per_token, 0) AS fpt,
    coalesce(flops, 0) AS flops,
    sum(greatest(0, 1 - step::float8 / greatest(total_steps, 1))) AS left_fraction
  FROM runs WHERE sweep_id = $1 AND state IN ('leased', 'running') GROUP BY 1, 2, 3, 4)
SELECT s.device, s.dtype, s.fpt AS flops_per_token, s.flops AS flops_per_run,
  s.queued::bigint AS queued, coalesce(h.left_fraction, 0) AS left_fraction,
  coalesce(s.unknown, 0)::bigint AS unknown
FROM shapes s LEFT JOIN held h
  ON h.device = s.device AND h.dtype = s.dtype AND h.fpt = s.fpt AND h.flops = s.flops
