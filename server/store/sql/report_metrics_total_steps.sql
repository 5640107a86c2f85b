-- The run's last step, under the fence (run $1, attempt $2, token digest $3, lease held).
SELECT total_steps FROM runs
WHERE id = $1 AND attempt = $2 AND lease_token_sha256 = $3 AND state IN ('leased', 'running')
