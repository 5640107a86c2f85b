-- Lease, first statement: the worker's row, locked. $1 worker id, $2 the caller's token id,
-- $3 kMaxWorkerSlots. Returns (is the caller's, stopped, slots).
SELECT token_id IS NOT DISTINCT FROM $2, stopped_at IS NOT NULL,
  least(greatest(coalesce((info->>'slots')::int, 1), 1), $3)
FROM workers WHERE id = $1 FOR UPDATE
