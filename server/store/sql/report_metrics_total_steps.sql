-- The run's last step, under the fence (run $1, attempt $2, token digest $3: lease_held,
-- migration 0018).
SELECT total_steps FROM runs
WHERE id = $1 AND lease_held(runs, $2, $3)
