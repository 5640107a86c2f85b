-- The runs of sweep $1 holding a lease (leased, running), in queue order: what a WatchSweep frame
-- of a big sweep carries. The columns pg::RunFromRow reads, as runs_page; the runs_held_by_sweep
-- index (migration 0011) finds them without walking the sweep's other runs.
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
WHERE r.sweep_id = $1 AND r.state IN ('leased', 'running') ORDER BY r.order_index
