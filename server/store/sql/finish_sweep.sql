-- Marks the active sweep $1 finished if none of its runs is unfinished (the unfinished states are
-- checked against util::IsTerminal in run_transitions.cc). Returns it when it did.
UPDATE sweeps s SET state = 'finished', finished_at = now()
WHERE s.state = 'active' AND s.id = $1
  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.sweep_id = s.id
                  AND r.state IN ('queued', 'leased', 'running'))
RETURNING s.id
