-- Data key $1's (state, claim token digest), locked.
SELECT state, claim_token_sha256 FROM prepared_data
WHERE key = $1 FOR UPDATE
