-- The workers that may lease now ($1 the lease period in seconds: not stopped, seen within one,
-- neither benched nor owing their self-check), and those live but benched: whether any of a
-- sweep's queued work can run (its ETA,
-- docs/server.md#workers-states-and-benching-read-side).
SELECT count(*) FILTER (WHERE NOT coalesce(benched_until > now(), false) AND NOT self_check_due)
    AS can_lease,
  count(*) FILTER (WHERE coalesce(benched_until > now(), false) OR self_check_due) AS benched
FROM workers
WHERE stopped_at IS NULL AND last_seen_at >= now() - make_interval(secs => $1::float8)
