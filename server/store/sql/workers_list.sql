-- Workers (only live ones unless $2, and those gone offline within the last $3 seconds when
-- $3 > 0; only worker $4 unless 0), $1 being the lease period in seconds. The state
-- (docs/server.md#workers-states-and-benching-read-side):
-- - offline: stopped, or not seen for two lease periods;
-- - lost: not seen for over one lease period (its heartbeats stopped; the leases it holds expire
--   and are requeued by the reaper), not yet offline;
-- - benched: its bench runs (benched_until ahead) or its self-check is due
--   (docs/server.md#failures);
-- - busy / idle: holding a lease or not. Busy and the runs held come from the runs' leases (the
--   runs_leases partial index covers exactly them).
-- Then the bench's end (unix seconds, 0: none), its reason, the self-check due, the fault streak
-- and the attempts it ended with a worker-side or unknown failure.
WITH held AS (SELECT worker_id, array_agg(id ORDER BY id) AS ids FROM runs
  WHERE state IN ('leased', 'running') GROUP BY worker_id)
SELECT w.id, w.info::text AS info, CASE WHEN w.stopped_at IS NOT NULL
  OR w.last_seen_at < now() - make_interval(secs => 2 * $1::float8) THEN 'offline'
  WHEN w.last_seen_at < now() - make_interval(secs => $1::float8) THEN 'lost'
  WHEN w.benched_until > now() OR w.self_check_due THEN 'benched'
  WHEN held.ids IS NOT NULL THEN 'busy' ELSE 'idle' END AS state,
  extract(epoch from w.registered_at) AS registered_at,
  extract(epoch from w.last_seen_at) AS last_seen_at,
  coalesce(held.ids[1], 0) AS current_run_id, w.runs_completed,
  coalesce(array_to_string(held.ids, ','), '') AS held_run_ids,
  (SELECT count(*) FROM prepared_data p WHERE p.worker_id = w.id
    AND p.state = 'preparing' AND p.claim_expires_at >= now()) AS open_data_claims,
  coalesce(extract(epoch from w.benched_until), 0) AS benched_until, w.bench_reason, w.self_check_due,
  w.fault_streak, w.runs_faulted
FROM workers w LEFT JOIN held ON held.worker_id = w.id
WHERE ($2 OR (w.stopped_at IS NULL
  AND w.last_seen_at >= now() - make_interval(secs => 2 * $1::float8))
  OR ($3::float8 > 0 AND coalesce(w.stopped_at,
    w.last_seen_at + make_interval(secs => 2 * $1::float8))
    >= now() - make_interval(secs => $3::float8)))
  AND ($4::bigint = 0 OR w.id = $4::bigint)
ORDER BY w.name
