-- Release: under the fence (run $1, attempt $2, token digest $3, lease held), back to the queue
-- without spending an attempt.
UPDATE runs SET state = 'queued', lease_expires_at = NULL,
  max_attempts = max_attempts + 1
WHERE id = $1 AND attempt = $2 AND lease_token_sha256 = $3 AND state IN ('leased', 'running')
RETURNING sweep_id, device, worker_id
