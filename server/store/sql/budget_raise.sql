-- `ablate budget SWEEP --raise $2`: adds $2 to whichever limit sweep $1 has. Returns the new
-- limits (no row: the sweep has no budget).
UPDATE sweeps SET budget_gpu_hours = budget_gpu_hours + $2, budget_usd = budget_usd + $2
WHERE id = $1 AND (budget_gpu_hours IS NOT NULL OR budget_usd IS NOT NULL)
RETURNING budget_gpu_hours, budget_usd
