-- The newest change of run $1's points (its largest metric_points.seq; 0: none), read by the
-- metric_points_changes index: where a pass of GetRunMetrics over the run's points ends.
SELECT coalesce(max(seq), 0) AS seq FROM metric_points WHERE run_id = $1
