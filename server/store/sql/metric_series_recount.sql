-- The series of runs $1 counted again from metric_points (run_metric_series, migration 0033):
-- after a batch upserted points some of which were stored already, and after a new attempt's
-- Lease deleted the points past its resume step. Names left with no point lose their row
-- (metric_series_clear first).
INSERT INTO run_metric_series (run_id, name, points)
SELECT run_id, name, count(*) FROM metric_points WHERE run_id = ANY($1::bigint[])
GROUP BY run_id, name
ON CONFLICT (run_id, name) DO UPDATE SET points = excluded.points
