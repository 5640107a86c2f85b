-- Marks the active sweep $1 finished (every active sweep when $1 is null: the reaper's pass) if
-- none of its runs is unfinished (the unfinished states are checked against util::IsTerminal in
-- run_transitions.cc). Returns each sweep it finished. The optional id is a range on the primary
-- key, not `$1 IS NULL OR s.id = $1`: the prepared statement's generic plan then scans
-- sweeps_pkey for one sweep (every Complete) as well as for all, where the OR form's is a scan of
-- the whole table, which left PostgreSQL planning the statement again at each execution.
UPDATE sweeps s SET state = 'finished', finished_at = now()
WHERE s.state = 'active'
  AND s.id BETWEEN coalesce($1::bigint, 0) AND coalesce($1::bigint, 9223372036854775807)
  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.sweep_id = s.id
                  AND r.state IN ('queued', 'leased', 'running'))
RETURNING s.id
