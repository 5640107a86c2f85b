-- As check_fence, holding off a re-lease until the checkpoint is recorded.
SELECT 1 FROM runs
WHERE id = $1 AND attempt = $2 AND lease_token_sha256 = $3 AND state IN ('leased', 'running')
FOR SHARE
