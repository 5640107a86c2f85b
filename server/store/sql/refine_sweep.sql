-- What refinement and pruning read of sweep $1.
SELECT refine::text, prune_above_divergence, state, priority,
  max_attempts, spec_yaml, file_name FROM sweeps WHERE id = $1
