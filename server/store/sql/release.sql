-- Release: under the fence (run $1, attempt $2, token digest $3: lease_held, migration 0018),
-- back to the queue without spending an attempt; the run's $4-th release fails it instead
-- (--max-releases, migration 0030), so a lease-and-release loop cannot go on for ever. Returns
-- (sweep, device, worker, the run ended failed, its error).
UPDATE runs SET releases = releases + 1,
  state = CASE WHEN releases + 1 >= $4 THEN 'failed' ELSE 'queued' END,
  max_attempts = CASE WHEN releases + 1 >= $4 THEN max_attempts ELSE max_attempts + 1 END,
  error = CASE WHEN releases + 1 >= $4 THEN format(
    'handed back %s times (--max-releases); the last on attempt %s', releases + 1, attempt)
    ELSE error END,
  finished_at = CASE WHEN releases + 1 >= $4 THEN now() END,
  lease_expires_at = NULL
WHERE id = $1 AND lease_held(runs, $2, $3)
RETURNING sweep_id, device, worker_id, state = 'failed' AS ended, error
