-- The cells of active sweeps, for the Prometheus exporter (the Sweep dashboard's LR x depth
-- tables): per (sweep, cell) its first run's label values and grid point (no seed), the round
-- that added it, the mean val loss over its runs by run_loss (migration 0013, as ListCells) and
-- the highest max attention logit any of its runs reported (diverged ones too; NaN left out).
-- Every run of an active sweep is read, queued ones included, so a refined cell shows its round
-- before it starts.
SELECT c.sweep_id,
  coalesce(p.grid->>'qk_norm', p.config->>'qk_norm', '') AS qk_norm,
  coalesce(p.grid->>'lr', p.config->>'lr', '') AS lr,
  coalesce(p.grid->>'n_layer', p.config->>'n_layer', '') AS n_layer,
  coalesce(p.grid - 'seed', '{}'::jsonb)::text AS grid_values, c.round AS refine_round,
  c.loss_sum / nullif(c.loss_n, 0) AS val_loss, c.max_logit AS max_attn_logit
FROM (
  SELECT r.sweep_id, r.cell, min(r.id) AS first_id, min(r.refine_round) AS round,
    sum(run_loss(r.state, r.result, r.latest_val_loss)) AS loss_sum,
    count(run_loss(r.state, r.result, r.latest_val_loss)) AS loss_n,
    max(r.latest_max_attn_logit) FILTER (WHERE r.latest_max_attn_logit <> 'NaN'::float8)
      AS max_logit
  FROM runs r JOIN sweeps s ON s.id = r.sweep_id
  WHERE s.state = 'active'
  GROUP BY r.sweep_id, r.cell
) c LEFT JOIN run_specs rs ON rs.run_id = c.first_id
LEFT JOIN run_spec_base b ON b.sweep_id = c.sweep_id
CROSS JOIN LATERAL (SELECT run_spec_part(b.spec, rs.spec, rs.own, 'grid_values') AS grid,
  run_spec_part(b.spec, rs.spec, rs.own, 'config') AS config) p
WHERE c.loss_n > 0 OR c.max_logit IS NOT NULL OR c.round > 0
