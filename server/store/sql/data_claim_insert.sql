-- Data preparation: the first claim on key $1 (description $5), by worker $2 with token digest
-- $3 for $4 seconds. Returns the expiry (no row: another worker's claim came first).
INSERT INTO prepared_data (key, state, description, worker_id,
  claim_token_sha256, claim_expires_at) VALUES ($1, 'preparing', $5, $2, $3,
  now() + make_interval(secs => $4)) ON CONFLICT (key) DO NOTHING
RETURNING EXTRACT(EPOCH FROM claim_expires_at)::float8 AS claim_expires_at
