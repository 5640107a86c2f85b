-- Workers not offline ($1 the lease period in seconds: not stopped, seen within two) that ever
-- ended an attempt for a worker-side or unknown cause, or are benched now: name, device kind,
-- those attempts, benched now (its bench runs or its self-check is due), and the bench's end in
-- unix seconds (0: none). A few rows: what /metrics names per worker.
SELECT name, device_kind, runs_faulted,
  coalesce(benched_until > now(), false) OR self_check_due AS benched,
  coalesce(extract(epoch from benched_until), 0) AS benched_until
FROM workers
WHERE stopped_at IS NULL AND last_seen_at >= now() - make_interval(secs => 2 * $1::float8)
  AND (runs_faulted > 0 OR benched_until > now() OR self_check_due)
ORDER BY name
