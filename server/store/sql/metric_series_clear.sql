-- Before metric_series_recount: runs $1 have no counted series (run_metric_series).
DELETE FROM run_metric_series WHERE run_id = ANY($1::bigint[])
