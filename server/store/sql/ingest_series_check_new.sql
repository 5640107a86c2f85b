-- ReportMetrics, when ingest_series_check found runs over a bound: the same check for those runs
-- counting only the points not stored yet (an index probe each). $1, $2, $3: their points (run,
-- name, step); $4..$6 as there. A worker re-sending a report whose answer it lost adds nothing,
-- so it is not refused at a bound it does not cross. Returns, per run still over a bound, its
-- points, names and largest series as they would be.
WITH p AS (SELECT DISTINCT * FROM unnest($1::bigint[], $2::text[], $3::bigint[])
  AS p(run_id, name, step)),
n AS (SELECT p.run_id, p.name, count(*) AS points FROM p
  WHERE NOT EXISTS (SELECT 1 FROM metric_points m
    WHERE m.run_id = p.run_id AND m.name = p.name AND m.step = p.step)
  GROUP BY p.run_id, p.name)
SELECT over_run AS run_id, over_points AS points, over_names AS names, over_top AS top
FROM run_series_over(ARRAY(SELECT run_id FROM n ORDER BY run_id, name),
  ARRAY(SELECT name FROM n ORDER BY run_id, name),
  ARRAY(SELECT points FROM n ORDER BY run_id, name), $4, $5, $6)
