-- The fence every worker write passes: run $1, attempt $2, token digest $3,
-- lease_held (migration 0018).
SELECT 1 FROM runs
WHERE id = $1 AND lease_held(runs, $2, $3)
