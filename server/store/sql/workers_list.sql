-- Workers (only live ones unless $2, and those gone offline within the last $3 seconds when
-- $3 > 0): offline when stopped or not seen for $1 seconds; busy and the runs held come from the
-- runs' leases (the runs_leases partial index covers exactly them).
WITH held AS (SELECT worker_id, array_agg(id ORDER BY id) AS ids FROM runs
  WHERE state IN ('leased', 'running') GROUP BY worker_id)
SELECT w.id, w.info::text, CASE WHEN w.stopped_at IS NOT NULL
  OR w.last_seen_at < now() - make_interval(secs => $1)
  THEN 'offline' WHEN held.ids IS NOT NULL THEN 'busy' ELSE 'idle' END,
  extract(epoch from w.registered_at), extract(epoch from w.last_seen_at),
  coalesce(held.ids[1], 0), w.runs_completed,
  coalesce(array_to_string(held.ids, ','), ''),
  (SELECT count(*) FROM prepared_data p WHERE p.worker_id = w.id
    AND p.state = 'preparing' AND p.claim_expires_at >= now())
FROM workers w LEFT JOIN held ON held.worker_id = w.id
WHERE $2 OR (w.stopped_at IS NULL AND w.last_seen_at >= now() -
make_interval(secs => $1)) OR ($3::float8 > 0 AND coalesce(w.stopped_at, w.last_seen_at +
make_interval(secs => $1)) >= now() - make_interval(secs => $3::float8))
ORDER BY w.name
