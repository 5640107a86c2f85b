-- Sweep $1's base run spec (JSON), which its runs' specs are stored against (migration 0014); no
-- row for a sweep stored before it. Read by refinement only when it adds runs.
SELECT spec::text AS spec FROM run_spec_base WHERE sweep_id = $1
