-- As data_check_claim, with the claim's row locked.
SELECT 1 FROM prepared_data WHERE key = $1 AND
  state = 'preparing' AND claim_token_sha256 = $2 AND
  claim_expires_at >= now() FOR UPDATE
