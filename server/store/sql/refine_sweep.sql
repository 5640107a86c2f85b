-- What refinement and pruning read of sweep $1, with the base its runs' specs are stored against
-- (migration 0014; NULL for a sweep stored before it).
SELECT refine::text, prune_above_divergence, state, priority,
  max_attempts, spec_yaml, file_name, (SELECT spec::text FROM run_spec_base WHERE sweep_id = $1)
FROM sweeps WHERE id = $1
