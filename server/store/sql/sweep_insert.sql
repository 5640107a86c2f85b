-- A new sweep. Returns its id.
INSERT INTO sweeps (name, spec_yaml, file_name, priority, max_attempts, axes,
  submitted_by, refine, prune_above_divergence)
VALUES ($1, $2, $3, $4, $5, $6::text[], $7, NULLIF($8, '')::jsonb, $9)
RETURNING id
