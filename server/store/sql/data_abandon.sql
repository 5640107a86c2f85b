-- Drops the claim of token digest $2 on data key $1. Returns a row when it held one.
DELETE FROM prepared_data WHERE key = $1 AND
  state = 'preparing' AND claim_token_sha256 = $2
RETURNING 1
