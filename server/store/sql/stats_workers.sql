-- Workers by (state, device kind): offline when stopped or not seen for $1 seconds, busy when
-- holding a lease (a worker with --slots may hold several; see workers_list).
SELECT CASE WHEN stopped_at IS NOT NULL
  OR last_seen_at < now() - make_interval(secs => $1) THEN 'offline'
  WHEN EXISTS (SELECT 1 FROM runs r WHERE r.worker_id = w.id
    AND r.state IN ('leased', 'running')) THEN 'busy' ELSE 'idle' END AS st,
  device_kind, count(*) FROM workers w GROUP BY st, device_kind
