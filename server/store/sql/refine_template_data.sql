-- The data sets in run $1's stored spec.
SELECT (spec->'data')::text FROM run_specs WHERE run_id = $1
