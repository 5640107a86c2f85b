-- The started runs of active sweeps still in flight (leased, running), for the Prometheus
-- exporter's per-run series; a finished run is folded into its cell (stats_active_cells), so the
-- series of a 100,000-run sweep are its cells and the runs training now.
SELECT r.id AS run_id, r.sweep_id,
  coalesce(p.grid->>'qk_norm', p.config->>'qk_norm', '') AS qk_norm,
  coalesce(p.grid->>'lr', p.config->>'lr', '') AS lr,
  coalesce(p.grid->>'n_layer', p.config->>'n_layer', '') AS n_layer,
  r.seed::text AS seed, r.step, r.latest_train_loss, r.latest_val_loss, r.tokens_per_second,
  r.latest_max_attn_logit, r.latest_probes::text AS probes,
  coalesce(p.grid, '{}'::jsonb)::text AS grid_values, r.refine_round
FROM runs r JOIN sweeps s ON s.id = r.sweep_id
LEFT JOIN run_specs rs ON rs.run_id = r.id
LEFT JOIN run_spec_base b ON b.sweep_id = r.sweep_id
CROSS JOIN LATERAL (SELECT run_spec_part(b.spec, rs.spec, rs.own, 'grid_values') AS grid,
  run_spec_part(b.spec, rs.spec, rs.own, 'config') AS config) p
WHERE s.state = 'active' AND r.state IN ('leased', 'running') AND r.started_at IS NOT NULL
