-- As check_fence, holding off a re-lease until the checkpoint is recorded.
SELECT 1 FROM runs
WHERE id = $1 AND lease_held(runs, $2, $3)
FOR SHARE
