-- Active sweeps with a budget: the budget keeper's round.
SELECT id FROM sweeps WHERE state = 'active'
  AND (budget_gpu_hours IS NOT NULL OR budget_usd IS NOT NULL) ORDER BY id
