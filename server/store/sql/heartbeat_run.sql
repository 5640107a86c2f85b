-- Heartbeat: run $1, locked: (state, attempt, does token digest $2 match, is the lease held).
SELECT state, attempt, lease_token_sha256 = $2, state IN ('leased', 'running')
FROM runs WHERE id = $1 FOR UPDATE
