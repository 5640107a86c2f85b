-- Deletes sweep $1; triggers (migrations 0010, 0015) and ON DELETE CASCADE take its runs and with
-- them run_specs, run_spec_base, metric_points, checkpoints, run_events, run_logs and run_usage. Workers whose current run was one of them
-- forget it (workers.current_run_id has no foreign key). Returns the SHA-256 of every checkpoint
-- the sweep's runs kept, each once: the blob files to remove after commit if nothing else
-- references them (blob_unreferenced).
WITH doomed AS (SELECT id FROM runs WHERE sweep_id = $1),
shas AS (SELECT DISTINCT c.sha256 FROM checkpoints c JOIN doomed d ON d.id = c.run_id),
w AS (UPDATE workers SET current_run_id = NULL
  WHERE current_run_id IN (SELECT id FROM doomed)),
gone AS (DELETE FROM sweeps WHERE id = $1)
SELECT sha256 FROM shas
