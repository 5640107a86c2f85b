-- The started runs of active sweeps still in flight (leased, running), for the Prometheus
-- exporter's per-run series; a finished run is folded into its cell (stats_active_cells), so the
-- series of a 100,000-run sweep are its cells and the runs training now.
SELECT r.id, r.sweep_id,
  coalesce(rs.spec->'grid_values'->>'qk_norm', rs.spec->'config'->>'qk_norm', ''),
  coalesce(rs.spec->'grid_values'->>'lr', rs.spec->'config'->>'lr', ''),
  coalesce(rs.spec->'grid_values'->>'n_layer', rs.spec->'config'->>'n_layer', ''),
  r.seed::text, r.step, r.latest_train_loss, r.latest_val_loss, r.tokens_per_second,
  r.latest_max_attn_logit, r.latest_probes::text,
  coalesce(rs.spec->'grid_values', '{}'::jsonb)::text, r.refine_round
FROM runs r JOIN sweeps s ON s.id = r.sweep_id
LEFT JOIN run_specs rs ON rs.run_id = r.id
WHERE s.state = 'active' AND r.state IN ('leased', 'running') AND r.started_at IS NOT NULL
