-- Retry: sweep $1's runs in states $2 (those in $3; all when $3 is empty) back to the queue with
-- the sweep's max_attempts more attempts and fresh allowances for preemptions and worker-side
-- failures (docs/server.md#failures). Returns (device, runs requeued) per device.
WITH q AS (UPDATE runs SET state = 'queued', error = '', result = NULL,
  finished_at = NULL, lease_expires_at = NULL,
  max_attempts = attempt + (SELECT max_attempts FROM sweeps WHERE id = $1),
  preemptions = 0, worker_faults = 0, faulted_workers = '{}'
  WHERE sweep_id = $1 AND state = ANY($2::text[])
  AND (cardinality($3::bigint[]) = 0 OR id = ANY($3::bigint[]))
  RETURNING id, attempt, device),
e AS (INSERT INTO run_events (run_id, kind, attempt, message)
  SELECT id, 'requeued', attempt, 'retried by user' FROM q)
SELECT device, count(*) AS requeued FROM q GROUP BY device
