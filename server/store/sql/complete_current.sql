-- After a fenced-off Complete: run $1's (state, attempt, does token digest $2 match), to accept a
-- retry whose result is already there.
SELECT state, attempt, lease_token_sha256 = $2 FROM runs WHERE id = $1
