-- As finish_sweep, for every active sweep (the reaper's pass).
UPDATE sweeps s SET state = 'finished', finished_at = now()
WHERE s.state = 'active'
  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.sweep_id = s.id
                  AND r.state IN ('queued', 'leased', 'running'))
RETURNING s.id
