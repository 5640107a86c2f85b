-- The metric names run $1 has points under (run_metric_series, migration 0033), in order.
SELECT name FROM run_metric_series WHERE run_id = $1 ORDER BY name
