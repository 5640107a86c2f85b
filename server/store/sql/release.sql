-- Release: under the fence (run $1, attempt $2, token digest $3: lease_held, migration 0018),
-- back to the queue without spending an attempt.
UPDATE runs SET state = 'queued', lease_expires_at = NULL,
  max_attempts = max_attempts + 1
WHERE id = $1 AND lease_held(runs, $2, $3)
RETURNING sweep_id, device, worker_id
