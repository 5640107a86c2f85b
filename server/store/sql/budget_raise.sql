-- `ablate budget SWEEP --raise $2`: adds $2 to whichever limit sweep $1 has, at most to 1e12 (so
-- repeated raises stay finite). Returns the new limits (no row: the sweep has no budget).
UPDATE sweeps SET budget_gpu_hours = least(budget_gpu_hours + $2, 1e12),
  budget_usd = least(budget_usd + $2, 1e12)
WHERE id = $1 AND (budget_gpu_hours IS NOT NULL OR budget_usd IS NOT NULL)
RETURNING budget_gpu_hours, budget_usd
