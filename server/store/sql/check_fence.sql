-- The fence every worker write passes: run $1, attempt $2, token digest $3, the lease held.
SELECT 1 FROM runs
WHERE id = $1 AND attempt = $2 AND lease_token_sha256 = $3 AND state IN ('leased', 'running')
