-- `ablate budget SWEEP --raise $2`: adds $2 to the limit sweep $1 has, at most to 1e12 (so
-- repeated raises stay finite), and leaves the other limit NULL: least() ignores NULLs, so
-- least(NULL + $2, 1e12) would give a gpu_hours budget a $1e12 limit too (and a usd budget
-- 1e12 GPU-hours), and the dollar limit, read first, would lift the budget altogether.
-- Returns the new limits (no row: the sweep has no budget).
UPDATE sweeps SET
  budget_gpu_hours = CASE WHEN budget_gpu_hours IS NOT NULL
                          THEN least(budget_gpu_hours + $2, 1e12) END,
  budget_usd = CASE WHEN budget_usd IS NOT NULL THEN least(budget_usd + $2, 1e12) END
WHERE id = $1 AND (budget_gpu_hours IS NOT NULL OR budget_usd IS NOT NULL)
RETURNING budget_gpu_hours, budget_usd
