-- Budget keeper, first: sweep $1's limits and runs left, locked, so no Lease takes a run of it
-- until the new count is written (Lease decrements under the same row lock).
SELECT budget_gpu_hours, budget_usd, budget_runs_left, state = 'active' AS active
FROM sweeps WHERE id = $1 FOR UPDATE
