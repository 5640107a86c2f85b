-- Budget keeper, last: sweep $1 may start $2 more runs; $3 the figures (ablate.v1.Budget JSON).
-- Returns the count it replaced.
UPDATE sweeps s SET budget_runs_left = $2, budget_state = $3::jsonb
FROM (SELECT budget_runs_left FROM sweeps WHERE id = $1) old
WHERE s.id = $1 RETURNING old.budget_runs_left
