-- Register: the live workers of token $1 other than name $2 (not stopped, seen within $3
-- seconds, the lease period), which --max-worker-names bounds.
SELECT count(*) AS live FROM workers
WHERE token_id IS NOT DISTINCT FROM $1 AND name <> $2 AND stopped_at IS NULL
  AND last_seen_at >= now() - make_interval(secs => $3::float8)
