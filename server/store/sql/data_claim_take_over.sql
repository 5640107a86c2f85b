-- Data preparation: worker $2 takes over the expired claim on key $1 with token digest $3 for $4
-- seconds. Returns the new expiry (no row: the key is no longer being prepared).
UPDATE prepared_data SET worker_id = $2, claim_token_sha256 = $3,
  claim_expires_at = now() + make_interval(secs => $4), claims = claims + 1
WHERE key = $1 AND state = 'preparing'
RETURNING EXTRACT(EPOCH FROM claim_expires_at)::float8 AS claim_expires_at
