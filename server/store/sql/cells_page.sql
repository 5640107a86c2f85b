-- The cells of sweep $1 whose key sorts after $2, $3 of them in key order, each folded from its
-- runs (ListCells, `ablate status`): runs by state, the mean val loss over runs that have one
-- (run_loss, migration 0013), the running runs' steps, the round that added the cell, and the
-- grid point of its first run. The (sweep_id, cell, seed) unique index gives the rows in cell
-- order, so a page reads its own cells' runs and stops. A seed-only sweep's one cell has the
-- empty key, which sorts after nothing: the first page ($2 empty) takes every key. A step is
-- read within 0..total_steps, whatever an older row holds (a heartbeat once stored 2^63 - 1).
SELECT c.cell, (run_spec_part(b.spec, rs.spec, rs.own, 'grid_values') - 'seed')::text AS grid_values,
  c.round,
  c.queued, c.leased, c.running, c.succeeded, c.diverged, c.failed, c.cancelled, c.skipped,
  c.total, c.refined, c.loss_sum, c.loss_n, c.steps, c.total_steps
FROM (
  SELECT r.cell, min(r.id) AS first_id, min(r.refine_round) AS round,
    count(*) FILTER (WHERE r.state = 'queued') AS queued,
    count(*) FILTER (WHERE r.state = 'leased') AS leased,
    count(*) FILTER (WHERE r.state = 'running') AS running,
    count(*) FILTER (WHERE r.state = 'succeeded') AS succeeded,
    count(*) FILTER (WHERE r.state = 'diverged') AS diverged,
    count(*) FILTER (WHERE r.state = 'failed') AS failed,
    count(*) FILTER (WHERE r.state = 'cancelled') AS cancelled,
    count(*) FILTER (WHERE r.state = 'skipped') AS skipped,
    count(*) AS total,
    count(*) FILTER (WHERE r.refine_round > 0) AS refined,
    coalesce(sum(run_loss(r.state, r.result, r.latest_val_loss)), 0) AS loss_sum,
    count(run_loss(r.state, r.result, r.latest_val_loss)) AS loss_n,
    coalesce(sum(least(greatest(r.step, 0), r.total_steps)) FILTER (WHERE r.state = 'running'),
      0) AS steps,
    coalesce(sum(r.total_steps) FILTER (WHERE r.state = 'running'), 0) AS total_steps
  FROM runs r
  WHERE r.sweep_id = $1 AND r.cell >= $2 AND (r.cell > $2 OR $2 = '')
  GROUP BY r.cell ORDER BY r.cell LIMIT $3
) c LEFT JOIN run_specs rs ON rs.run_id = c.first_id
LEFT JOIN run_spec_base b ON b.sweep_id = $1
ORDER BY c.cell
