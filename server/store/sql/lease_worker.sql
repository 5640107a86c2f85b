-- Lease, first statement: the worker's row, locked. $1 worker id, $2 the caller's token id,
-- $3 kMaxWorkerSlots. Returns (is the caller's, stopped, slots, benched now, bench end as unix
-- seconds, bench reason, self-check due, device memory per slot).
SELECT token_id IS NOT DISTINCT FROM $2 AS callers, stopped_at IS NOT NULL AS stopped,
  least(greatest(coalesce((info->>'slots')::int, 1), 1), $3) AS slots,
  coalesce(benched_until > now(), false) AS benched,
  coalesce(extract(epoch from benched_until), 0) AS benched_until, bench_reason, self_check_due, memory_per_slot
FROM workers WHERE id = $1 FOR UPDATE
