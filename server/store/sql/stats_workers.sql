-- Workers by (state, device kind), the states as workers_list says them ($1 the lease period in
-- seconds: offline after two of silence or once stopped, lost after one, benched while its bench
-- runs or its self-check is due, busy when holding a lease), with the attempts they ended for a
-- worker-side or unknown cause (docs/server.md#failures).
SELECT CASE WHEN stopped_at IS NOT NULL
  OR last_seen_at < now() - make_interval(secs => 2 * $1::float8) THEN 'offline'
  WHEN last_seen_at < now() - make_interval(secs => $1::float8) THEN 'lost'
  WHEN benched_until > now() OR self_check_due THEN 'benched'
  WHEN EXISTS (SELECT 1 FROM runs r WHERE r.worker_id = w.id
    AND r.state IN ('leased', 'running')) THEN 'busy' ELSE 'idle' END AS st,
  device_kind, count(*) AS workers, coalesce(sum(runs_faulted), 0)::bigint AS runs_faulted
FROM workers w GROUP BY st, device_kind
