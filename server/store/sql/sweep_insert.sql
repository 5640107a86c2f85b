-- A new sweep. Budget limits $10 (device-hours) and $11 (US dollars): 0 is none; a sweep with
-- one leases nothing until the budget keeper has looked at it (budget_runs_left 0).
-- Returns its id.
INSERT INTO sweeps (name, spec_yaml, file_name, priority, max_attempts, axes,
  submitted_by, refine, prune_above_divergence, budget_gpu_hours, budget_usd, budget_runs_left)
VALUES ($1, $2, $3, $4, $5, $6::text[], $7, NULLIF($8, '')::jsonb, $9,
  NULLIF($10::float8, 0), NULLIF($11::float8, 0),
  CASE WHEN $10::float8 > 0 OR $11::float8 > 0 THEN 0 END)
RETURNING id
