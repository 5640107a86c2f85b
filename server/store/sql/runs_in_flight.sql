-- The runs of sweep $1 holding a lease (leased, running), in queue order: what a WatchSweep frame
-- of a big sweep carries. As runs_page returns them (run_rows, migration 0019); the
-- runs_held_by_sweep index (migration 0011) finds them without walking the sweep's other runs.
SELECT * FROM run_rows
WHERE sweep_id = $1 AND state IN ('leased', 'running') ORDER BY order_index
