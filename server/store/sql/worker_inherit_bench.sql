-- Register, after worker_register: worker $1 (host key $2, token $3) takes over the bench of
-- another worker of the same token and host key (the same box and work dir under a new name)
-- that is benched or owes its self-check: the bench, its reason, the self-check, the streak and
-- the benches in a row move to it, and the old row, that box's former name, is marked stopped.
-- Returns the old name (no row: nothing to inherit).
WITH old AS (
  SELECT id, name, benched_until, bench_reason, self_check_due, fault_streak, bench_count
  FROM workers
  WHERE $2::text <> '' AND host_key = $2::text AND id <> $1 AND token_id IS NOT DISTINCT FROM $3
    AND (benched_until > now() OR self_check_due)
  ORDER BY id DESC LIMIT 1 FOR UPDATE),
gone AS (
  UPDATE workers o SET benched_until = NULL, bench_reason = '', self_check_due = false,
    stopped_at = coalesce(o.stopped_at, now())
  FROM old WHERE o.id = old.id)
UPDATE workers w SET benched_until = old.benched_until, bench_reason = old.bench_reason,
  self_check_due = old.self_check_due, fault_streak = greatest(w.fault_streak, old.fault_streak),
  bench_count = greatest(w.bench_count, old.bench_count)
FROM old WHERE w.id = $1
RETURNING old.name
