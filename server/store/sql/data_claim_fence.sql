-- The row of data key $1 if claim token digest $2 is its claim's, locked: (state, expired).
-- No row: that token holds no claim on the key (never did, taken over, or abandoned).
SELECT state, COALESCE(claim_expires_at < now(), false) AS expired FROM prepared_data
WHERE key = $1 AND claim_token_sha256 = $2 FOR UPDATE
