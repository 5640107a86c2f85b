-- ReportMetrics, after the batch's fence locked its runs: the runs whose accepted points would
-- take them past a bound (run_series_over, migration 0033), every point counted as new. $1, $2,
-- $3: per (run, name) of the batch, the points it brings; $4 the points a run may hold
-- (--max-points-per-run), $5 one name (--max-points-per-name), $6 the names (--max-metric-names).
-- Returns, per run over a bound, its points, names and largest series as they would be (no row:
-- every run fits).
SELECT over_run AS run_id, over_points AS points, over_names AS names, over_top AS top
FROM run_series_over($1::bigint[], $2::text[], $3::bigint[], $4, $5, $6)
