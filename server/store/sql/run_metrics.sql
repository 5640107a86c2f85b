-- Run $1's points after step $2 and sequence number $4, of the names in $3 (all when empty).
SELECT step, name, value, time, seq FROM metric_points WHERE run_id = $1
  AND step > $2 AND seq > $4
  AND (cardinality($3::text[]) = 0 OR name = ANY($3::text[])) ORDER BY step, name
