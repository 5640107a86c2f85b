-- Sweep $1's base run spec (JSON): its first run's, which its runs' specs are stored against
-- (migration 0014).
INSERT INTO run_spec_base (sweep_id, spec) VALUES ($1, $2::jsonb)
