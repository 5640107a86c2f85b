-- Sweep $1's name, state and how many of its runs are unfinished, its row locked until the
-- delete commits (a concurrent Retry or refinement, which update the sweep row, waits for it and
-- then finds nothing). No row: no such sweep.
SELECT s.name, s.state,
  (SELECT count(*) FROM runs r
   WHERE r.sweep_id = s.id AND r.state IN ('queued', 'leased', 'running')) AS unfinished
FROM sweeps s WHERE s.id = $1 FOR UPDATE OF s
