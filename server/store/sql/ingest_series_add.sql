-- ReportMetrics, after the batch's COPY: its new points counted into run_metric_series
-- (migration 0033). $1, $2, $3: per (run, name), the points added.
INSERT INTO run_metric_series (run_id, name, points)
SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[])
ON CONFLICT (run_id, name) DO UPDATE SET points = run_metric_series.points + excluded.points
