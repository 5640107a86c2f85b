-- One page of run $1's points: step > $2, of the names in $3 (all when empty), changed after
-- sequence number $4 and at most $5, after (name $6, step $7) in (name, step) order (the primary
-- key's), $8 of them. GetRunMetrics reads a run page by page, so no read holds a whole run.
SELECT step, name, value, time, seq FROM metric_points WHERE run_id = $1
  AND step > $2 AND seq > $4 AND seq <= $5 AND (name, step) > ($6::text, $7::bigint)
  AND (cardinality($3::text[]) = 0 OR name = ANY($3::text[]))
ORDER BY name, step LIMIT $8
