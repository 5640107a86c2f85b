-- Whether token digest $2 holds the live claim on data key $1.
SELECT 1 FROM prepared_data WHERE key = $1 AND
  state = 'preparing' AND claim_token_sha256 = $2
  AND claim_expires_at >= now()
