-- What deleting sweep $1 removes: its runs, their metric points, their checkpoints (rows) and
-- those checkpoints' bytes. One row.
SELECT
  (SELECT count(*) FROM runs WHERE sweep_id = $1) AS runs,
  (SELECT count(*) FROM metric_points m JOIN runs r ON r.id = m.run_id WHERE r.sweep_id = $1)
    AS metric_points,
  (SELECT count(*) FROM checkpoints c JOIN runs r ON r.id = c.run_id WHERE r.sweep_id = $1)
    AS checkpoints,
  (SELECT coalesce(sum(c.size_bytes), 0)::bigint
   FROM checkpoints c JOIN runs r ON r.id = c.run_id WHERE r.sweep_id = $1) AS checkpoint_bytes
