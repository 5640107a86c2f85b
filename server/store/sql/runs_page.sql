-- Runs of sweep $1 (every sweep when 0) in states $2 (any when empty), newest first as
-- sweep_list orders sweeps (the highest sweep id, then its last run first): $3 of them after
-- skipping $4. The columns pg::RunFromRow reads (refine_load_runs reads the same): a run's
-- config as stored, and whether that is a delta over its sweep's base config (migration 0014),
-- which RunFromRow merges in (pg::BaseConfigs: read once per sweep, not built here row by row);
-- then its memory estimate, preemptions, worker-side failures and the names of the workers whose
-- attempt failed for a worker-side or unknown cause (migration 0017), as a JSON array.
-- The page's ids are picked first, walking the runs_sweep_order index (the sweep id as a range,
-- so a generic plan still uses it), and only those rows are joined: a skipped row never touches
-- run_specs or run_charge.
SELECT r.id, r.sweep_id, r.cell, r.seed, r.state, r.attempt, r.max_attempts,
  coalesce(w.name, ''), r.step, r.total_steps, r.latest_train_loss, r.latest_val_loss,
  r.result::text, r.error, extract(epoch from r.created_at),
  extract(epoch from r.started_at), extract(epoch from r.finished_at),
  extract(epoch from r.lease_expires_at), r.order_index,
  run_spec_part(b.spec, rs.spec, rs.own, 'grid_values')::text,
  (CASE WHEN rs.own IS NULL THEN rs.spec ELSE rs.own END->'config')::text, r.refine_round,
  ru.device_seconds, ru.usd, ru.priced, ru.device_class, b.spec IS NOT NULL AND rs.own IS NOT NULL,
  r.memory_bytes, r.preemptions, r.worker_faults,
  (SELECT coalesce(array_to_json(array_agg(fw.name ORDER BY fw.name)), '[]')::text
    FROM workers fw WHERE fw.id = ANY(r.faulted_workers))
FROM runs r LEFT JOIN workers w ON w.id = r.worker_id
LEFT JOIN run_specs rs ON rs.run_id = r.id
LEFT JOIN run_spec_base b ON b.sweep_id = r.sweep_id
LEFT JOIN LATERAL run_charge(r.id) ru ON true
WHERE r.id IN (SELECT id FROM runs
  WHERE sweep_id BETWEEN CASE WHEN $1 = 0 THEN 0 ELSE $1 END
    AND CASE WHEN $1 = 0 THEN 9223372036854775807 ELSE $1 END
    AND (cardinality($2::text[]) = 0 OR state = ANY($2::text[]))
  ORDER BY sweep_id DESC, order_index DESC LIMIT $3 OFFSET $4)
ORDER BY r.sweep_id DESC, r.order_index DESC
